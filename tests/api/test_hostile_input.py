"""Input a careless or hostile client sends: never a 500, never an echo of a large input, and a
body over the bound refused before it is read whole."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from reflectrm.api.body import BodyLimit, too_large_detail
from reflectrm.app import create_app
from reflectrm.settings import Settings
from tests.api.served import served
from tests.conftest import ScriptedEngine, judgment

JSON = {"content-type": "application/json"}
GOOD = b'{"prompt": "q", "responses": ["a", "b"]}'


def engine() -> ScriptedEngine:
    return ScriptedEngine(stage1=[judgment(1)] * 8)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    app = create_app(Settings(), engine=engine())
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def messages(r: httpx.Response) -> str:
    """The 422 detail's messages, one string."""
    detail = r.json()["detail"]
    assert isinstance(detail, list), r.text
    assert detail, r.text
    assert all(e["msg"] and e["loc"] for e in detail)
    return " | ".join(e["msg"] for e in detail)


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        # A lone surrogate: was a 500 (the error handler could not encode the input back).
        (b'{"prompt": "q", "responses": ["\\ud800", "b"]}', "lone surrogate"),
        (b'{"prompt": "\\udfff", "responses": ["a", "b"]}', "valid string"),
        # Invalid UTF-8: was a 400 "There was an error parsing the body".
        (b'{"prompt": "q\xff", "responses": ["a", "b"]}', "invalid UTF-8 (byte 0xff at offset 13)"),
        (b"\xef\xbb\xbf" + GOOD, "BOM"),
        # A raw NUL inside a string is not JSON; an escaped one is text (and is judged).
        (b'{"prompt": "q\x00", "responses": ["a", "b"]}', "Invalid control character"),
        # Nesting deeper than the parser goes: was a 400 without a reason.
        (
            b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b', "responses": ["a","b"]}',
            "nested too deeply",
        ),
        # Integers: too long to read (was a 400), and merely out of range.
        (b'{"prompt": "q", "responses": ["a", "b"], "seed": ' + b"9" * 5000 + b"}", "5,000 digits"),
        (
            b'{"prompt": "q", "responses": ["a", "b"], "seed": ' + b"9" * 400 + b"}",
            "less than 2147483648",
        ),
        # NaN: was a 500 (the error handler could not write NaN back as JSON).
        (b'{"prompt": "q", "responses": ["a", "b"], "seed": NaN}', "NaN is not a JSON number"),
        (
            b'{"prompt": "q", "responses": ["a", "b"], "max_tokens": -Infinity}',
            "-Infinity is not a JSON number",
        ),
        # Duplicate keys: one JSON parser reads the first, another the last; refuse both.
        (b'{"prompt": "q", "responses": ["a", "b"], "prompt": "z"}', "'prompt' appears twice"),
        (b"", "no body"),
        (b"[]", "valid dictionary"),
        (b'"just a string"', "valid dictionary"),
    ],
)
def test_malformed_bodies_get_422_saying_what_is_wrong(
    client: TestClient, body: bytes, needle: str
):
    r = client.post("/v1/judge", content=body, headers=JSON)
    assert r.status_code == 422, r.text
    assert needle in messages(r)
    assert len(r.content) < 2000


def test_an_escaped_nul_is_text_and_is_judged(client: TestClient):
    r = client.post(
        "/v1/judge", content=b'{"prompt": "q\\u0000", "responses": ["a\\u0000", "b"]}', headers=JSON
    )
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
def test_a_body_that_is_not_declared_json_is_422_naming_the_content_type(
    client: TestClient, content_type: str | None
):
    headers = {"content-type": content_type} if content_type else {}
    r = client.post("/v1/judge", content=GOOD, headers=headers)
    assert r.status_code == 422
    assert "Content-Type: application/json" in messages(r)


def test_a_large_invalid_input_is_named_not_echoed(client: TestClient):
    # 3 MB of prompt: under the body bound, over the field bound. The 422 used to repeat it all.
    r = client.post("/v1/judge", json={"prompt": "x" * 3_000_000, "responses": ["a", "b"]})
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "prompt"]
    assert error["ctx"] == {"max_length": 1_000_000}
    assert "at most 1000000 characters" in error["msg"]
    assert len(r.content) < 500


def test_a_huge_unknown_key_is_quoted_cut_short(client: TestClient):
    key = "k" * 100_000
    r = client.post("/v1/judge", json={"prompt": "q", "responses": ["a", "b"], key: 1})
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["type"] == "extra_forbidden"
    assert error["loc"][1].endswith("... (100,000 characters)")
    assert len(error["loc"][1]) < 100
    assert len(r.content) < 500


# --- the body bound, before parsing -----------------------------------------------------------


class Sink:
    """An ASGI app that reads the whole body, and what it was sent back."""

    def __init__(self) -> None:
        self.read = 0

    async def __call__(self, scope, receive, send):
        while True:
            message = await receive()
            self.read += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def drive(app, headers: list[tuple[bytes, bytes]], chunks: int, chunk: bytes):
    """Offer ``chunks`` chunks of the body to ``app``; return (status, detail, chunks pulled)."""
    pulled = 0
    sent: list[dict] = []

    async def receive():
        nonlocal pulled
        pulled += 1
        return {"type": "http.request", "body": chunk, "more_body": pulled < chunks}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/judge", "headers": headers}
    await app(scope, receive, send)
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(body)["detail"] if status != 200 else body, pulled


async def test_a_declared_length_over_the_bound_is_refused_before_any_byte_is_read():
    sink = Sink()
    app = BodyLimit(sink, max_bytes=10_000)
    headers = [(b"content-length", b"1000000000")]  # 1 GB announced
    status, detail, pulled = await drive(app, headers, chunks=100_000, chunk=b"x" * 10_000)
    assert status == 413
    assert pulled == 0
    assert sink.read == 0
    assert detail == too_large_detail(10_000)
    assert "REFLECTRM_MAX_BODY_BYTES" in detail


async def test_a_chunked_body_is_cut_off_as_soon_as_it_passes_the_bound():
    # No Content-Length: 100,000 chunks of 1 KB are on offer (100 MB); the bound is 10 KB.
    sink = Sink()
    app = BodyLimit(sink, max_bytes=10_000)
    status, detail, pulled = await drive(app, [], chunks=100_000, chunk=b"x" * 1000)
    assert status == 413
    assert "10,000 bytes" in detail
    assert pulled == 11  # the 11th kilobyte passed the bound; nothing after it was read


async def test_bodies_within_the_bound_pass_untouched():
    sink = Sink()
    app = BodyLimit(sink, max_bytes=10_000)
    status, body, pulled = await drive(
        app, [(b"content-length", b"10000")], chunks=10, chunk=b"x" * 1000
    )
    assert status == 200
    assert body == b"ok"
    assert sink.read == 10_000
    assert pulled == 10


async def test_a_malformed_content_length_is_400():
    status, detail, pulled = await drive(
        BodyLimit(Sink(), 10_000), [(b"content-length", b"12ab")], 1, b""
    )
    assert status == 400
    assert "Content-Length" in detail
    assert pulled == 0


def raw_request(
    port: int, head: bytes, body_chunks: list[bytes], read_timeout: float = 30
) -> bytes:
    """Send a request over a plain socket; return the raw response (stops at the server's close
    or the first complete response)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as s:
        s.sendall(head)
        try:
            for chunk in body_chunks:
                s.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the body ended: what a bound does
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + _length(data):
            try:
                more = s.recv(65536)
            except ConnectionResetError:
                break
            if not more:
                break
            data += more
        return data


def _length(data: bytes) -> int:
    head = data.split(b"\r\n\r\n", 1)[0].lower()
    for line in head.split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


@pytest.fixture(scope="module")
def server():
    app = create_app(Settings(max_body_bytes=64 * 1024), engine=engine())
    with served(app) as s:
        yield s


def test_over_real_http_a_chunked_body_without_length_gets_413(server):
    head = (
        b"POST /v1/judge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )

    def framed(piece: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(piece), piece)

    # 200 MB offered in 8 KB chunks; the server answers after about 64 KB.
    chunks = [framed(b'{"prompt": "')] + [framed(b"x" * 8192)] * 25_000
    response = raw_request(server.port, head, chunks)
    status_line = response.split(b"\r\n", 1)[0]
    assert status_line == b"HTTP/1.1 413 Request Entity Too Large", response[:300]
    assert b"REFLECTRM_MAX_BODY_BYTES" in response


def test_over_real_http_a_large_content_length_gets_413_without_sending_the_body(server):
    head = (
        b"POST /v1/judge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000000\r\n\r\n"
    )
    response = raw_request(server.port, head, [])  # not a byte of the 100 MB is sent
    assert response.startswith(b"HTTP/1.1 413 "), response[:300]
    assert b"65,536 bytes" in response


def test_over_real_http_a_good_chunked_body_is_judged(server):
    r = httpx.post(f"{server.url}/v1/judge", content=iter([GOOD[:10], GOOD[10:]]), headers=JSON)
    assert r.status_code == 200, r.text
    assert r.headers.get("x-request-id")
