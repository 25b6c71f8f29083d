// The JavaScript guest SDK's boundary mappings (WIT 1.1.0) under node, against a fake host.
// test_js_guest.py copies sdk/js/stockade.js beside this file as stockade.mjs, with its
// host import pointed at fakehost.mjs.
import { http } from "./stockade.mjs";
import { calls, setAnswer } from "./fakehost.mjs";
import assert from "node:assert/strict";
const all = new Uint8Array(256).map((_, i) => i);
const lat = (bytes) => Array.from(bytes, (b) => String.fromCharCode(b)).join("");
setAnswer({ status: 200, headers: '[["A","1"],["B","x"]]', body: lat(all) });
let r = http.request("PUT", "u", { body: all, headers: [["X", "y"]] });
assert.equal(calls[0].body, lat(all));
assert.equal(calls[0].headers, '[["X","y"]]');
assert.deepEqual(Array.from(r.body), Array.from(all));
assert.deepEqual(r.headers, [["A", "1"], ["B", "x"]]);
// string bodies: UTF-8 bytes, latin-1 mapped
http.request("POST", "u", { body: "héllo €" });
assert.equal(calls[1].body, lat(new TextEncoder().encode("héllo €")));
http.request("POST", "u", { body: "plain" });
assert.equal(calls[2].body, "plain");
http.request("POST", "u", { body: "bad \ud800 surrogate" });
assert.equal(calls[3].body, lat(new TextEncoder().encode("bad \ud800 surrogate")));
// text(): UTF-8 decode like TextDecoder, BOM dropped, invalid -> U+FFFD
for (const bytes of [new TextEncoder().encode("pong é €"), new Uint8Array([0xef,0xbb,0xbf,0x41]), new Uint8Array([0x41, 0xff, 0x42]), new Uint8Array([0xc3])]) {
  setAnswer({ status: 200, headers: "[]", body: lat(bytes) });
  r = http.get("u");
  assert.equal(r.text(), new TextDecoder().decode(bytes));
}
setAnswer({ status: 200, headers: "[]", body: lat(new TextEncoder().encode('{"a":"é"}')) });
assert.deepEqual(http.get("u").json(), { a: "é" });
const p = http.post("u", { json: { x: 1 }, headers: { "X-T": "1" } });
assert.equal(calls.at(-1).headers, '[["X-T","1"],["Content-Type","application/json"]]');
console.log("js sdk conversions ok");
