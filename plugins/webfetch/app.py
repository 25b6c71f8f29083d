"""webfetch: read a documentation page as text.

The host decides where this may go (``http.allow`` in stockade.toml): the code below only
refuses what is not an https URL, so the allowlist stays in one place. A refusal by the
host (another host, a redirect off the list) becomes a tool failure naming the reason.

HTML is reduced to text with the standard library's ``html.parser``: scripts, styles
and other non-content elements are dropped, block elements start new lines and runs of
spaces collapse. Text is cut to ``max_chars`` (default 20000).
"""

import re
from html.parser import HTMLParser

from stockade import HttpDenied, HttpError, TooLarge, ToolError, ToolInputError, http, tool

DEFAULT_MAX_CHARS = 20_000
_FEED_CHARS = 16_384  # characters of markup parsed between checks of the text collected
MAX_CONTENT_TYPE = 200
_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption",
        "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li",
        "main", "nav", "ol", "p", "pre", "section", "table", "td", "th", "tr", "ul",
    }
)
_SPACES = re.compile(r"\s+")
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml")


class _TextExtractor(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []
        self.skipping = 0
        self.title = []
        self.in_title = False
        self.visible = 0  # non-space characters of body text collected so far

    def handle_starttag(self, tag, attrs):
        if tag == "title":
            self.in_title = True
        elif tag == "body":
            self.skipping = 0  # an unclosed <head> ends where the body starts
        elif tag in _SKIP:
            self.skipping += 1
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_startendtag(self, tag, attrs):
        if tag in _BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag == "title":
            self.in_title = False
        elif tag in _SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in _BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.in_title:
            self.title.append(data)
        elif not self.skipping:
            text = _SPACES.sub(" ", data)
            self.parts.append(text)
            self.visible += len(text) - text.count(" ")


def _collapse(text):
    lines = (" ".join(line.split()) for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


def html_to_text(markup, max_chars):
    """The readable text of an HTML document, title first.

    The markup is parsed in chunks and parsing stops once ``max_chars`` characters of
    text are in hand, so the work (and the fuel) follows what is returned, not the page.
    """
    parser = _TextExtractor()
    for start in range(0, len(markup), _FEED_CHARS):
        parser.feed(markup[start : start + _FEED_CHARS])
        if parser.visible >= max_chars:
            break
    parser.close()
    title = " ".join("".join(parser.title).split())
    body = _collapse("".join(parser.parts))
    return f"{title}\n\n{body}" if title and body else title or body


def _charset(content_type):
    for param in content_type.split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.lower() == "charset" and value:
            return value.strip().strip('"')
    return "utf-8"


def _decode(body, content_type):
    try:
        return body.decode(_charset(content_type), errors="replace")
    except LookupError:  # an unknown charset name
        return body.decode("utf-8", errors="replace")


def _check_url(url):
    if not url.lower().startswith("https://"):
        raise ToolInputError("url must start with https://")
    if any(ord(ch) <= 32 or ord(ch) == 127 for ch in url):
        raise ToolInputError("url may not contain spaces or control characters")


@tool("webfetch.fetch")
def fetch(input):
    url = input["url"]
    max_chars = input.get("max_chars", DEFAULT_MAX_CHARS)
    _check_url(url)
    try:
        response = http.get(url, headers={"Accept": "text/html, text/plain;q=0.9, */*;q=0.1"})
    except HttpDenied as exc:
        raise ToolError(f"refused by the host: {exc.detail}") from None
    except TooLarge:
        raise ToolError("the page is larger than 1 MiB") from None
    except HttpError as exc:
        raise ToolError(f"fetch failed: {exc}") from None
    content_type = (response.headers.get("content-type") or "").strip()
    media = content_type.split(";")[0].strip().lower()
    if media and not media.startswith(_TEXT_TYPES):
        raise ToolError(f"not a text document (content-type {media[:100]})")
    text = _decode(response.body, content_type)
    if media in ("text/html", "application/xhtml+xml") or (not media and "<html" in text[:1000].lower()):
        text = html_to_text(text, max_chars)
    return {
        "url": url,
        "status": response.status,
        "content_type": content_type[:MAX_CONTENT_TYPE],
        "text": text[:max_chars],
    }
