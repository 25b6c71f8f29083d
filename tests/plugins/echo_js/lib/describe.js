// A relative import, to prove multi-file projects build.
export function describe(response) {
  return { status: response.status, body: response.text(), content_type: response.header("content-type") || "" };
}
