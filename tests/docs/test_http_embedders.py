"""examples/http_embedders.py, run against local fake servers that speak OpenAI's and Voyage AI's embeddings
APIs (their request and answer shapes; no network): each embedder sends what its API takes (bearer key,
model, inputs, the dimension asked), at most `batch` texts and about `max_chars` characters a request,
never an empty text; puts the answers back in order by index; returns float32 rows of its dimension;
refuses an answer of another shape; and serves a MnemoClient, the command line (`--embedder
http_embedders:OpenAIEmbedder`) and the example's own command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

np = pytest.importorskip("numpy")

from helpers.embedders import Concepts  # noqa: E402
from helpers.paths import ROOT  # noqa: E402
from helpers.procs import subprocess_env  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.cli import main as cli_main  # noqa: E402

EXAMPLES = ROOT / "examples"
KEY = "sk-test-key"
# what each API takes in a request body, and the field naming the dimension
FIELDS = {
    "openai": ({"model", "input", "dimensions", "encoding_format"}, "dimensions"),
    "voyage": ({"model", "input", "output_dimension", "output_dtype"}, "output_dimension"),
}


def vectors_for(texts: list[str], dimension: int) -> np.ndarray:
    """The fake services' vectors: the test embedder's bag of concepts, padded to `dimension`."""
    out = np.zeros((len(texts), dimension), dtype=np.float32)
    out[:, :min(dimension, 32)] = Concepts().embed(texts)[:, :dimension]
    return out


class FakeService:
    """A local server speaking one API's POST /v1/embeddings; records each request's body. `wrong`:
    answer vectors one value short."""

    def __init__(self, api: str) -> None:
        self.api, self.requests, self.wrong = api, [], False
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                service.requests.append(body)
                fields, dimension_field = FIELDS[service.api]
                ok = (self.path == "/v1/embeddings" and self.headers["Authorization"] == f"Bearer {KEY}"
                      and set(body) == fields and isinstance(body["input"], list)
                      and all(isinstance(t, str) and t for t in body["input"]))
                if not ok:
                    self.send_response(400)
                    self.end_headers()
                    return
                dimension = body[dimension_field] - (1 if service.wrong else 0)
                vectors = vectors_for(body["input"], dimension)
                data = [{"object": "embedding", "index": i, "embedding": vectors[i].tolist()}
                        for i in range(len(vectors))]
                answer = json.dumps({"object": "list", "data": data[::-1], "model": body["model"],
                                     "usage": {"total_tokens": 1}}).encode()  # (out of order, on purpose)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(params=["openai", "voyage"])
def service(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeService]:
    fake = FakeService(request.param)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    for variable in ("OPENAI", "VOYAGE"):
        monkeypatch.setenv(f"{variable}_BASE_URL", fake.url)
        monkeypatch.setenv(f"{variable}_API_KEY", KEY)
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def embedder_of(service: FakeService, **options: Any) -> Any:
    import http_embedders

    return (http_embedders.OpenAIEmbedder if service.api == "openai" else http_embedders.VoyageEmbedder)(**options)


def test_an_embedder_sends_what_its_api_takes_in_batches_and_answers_float32_in_order(service: FakeService) -> None:
    embedder = embedder_of(service)
    assert (embedder.name, embedder.dimension) == (
        ("openai/text-embedding-3-small/1536", 1536) if service.api == "openai" else ("voyage/voyage-3.5/1024", 1024))
    texts = [f"note {i} about a flight" if i % 50 else "" for i in range(300)]
    vectors = embedder.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (300, embedder.dimension)
    assert not vectors[::50].any()  # the empty texts: zero, never sent
    sent = [t for t in texts if t]
    assert [len(body["input"]) for body in service.requests] == [128, 128, len(sent) - 256]
    assert [t for body in service.requests for t in body["input"]] == sent
    assert service.requests[0] == {
        "model": "text-embedding-3-small", "input": sent[:128], "dimensions": 1536, "encoding_format": "float",
    } if service.api == "openai" else {
        "model": "voyage-3.5", "input": sent[:128], "output_dimension": 1024, "output_dtype": "float",
    }
    keep = [i for i, t in enumerate(texts) if t]
    assert np.array_equal(vectors[keep], vectors_for(sent, embedder.dimension))


def test_a_request_holds_about_max_chars_at_most(service: FakeService) -> None:
    embedder = embedder_of(service, max_chars=100)
    embedder.embed(["x" * 60, "y" * 60, "z" * 30, "w" * 200])
    assert [body["input"] for body in service.requests] == [["x" * 60], ["y" * 60, "z" * 30], ["w" * 200]]


def test_an_answer_of_another_dimension_is_refused(service: FakeService) -> None:
    embedder = embedder_of(service, dimension=64)
    service.wrong = True
    with pytest.raises(RuntimeError, match=re.escape(f"{embedder.name}: vectors of shape (2, 63) came back, "
                                                     "expected (2, 64)")):
        embedder.embed(["one", "two"])


def test_a_missing_key_is_said(service: FakeService, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("VOYAGE_API_KEY")
    with pytest.raises(RuntimeError, match=r"(OPENAI|VOYAGE)_API_KEY is not set"):
        embedder_of(service).embed(["one"])
    assert service.requests == []


def test_a_client_recalls_by_meaning_through_the_service(service: FakeService, tmp_path: Any) -> None:
    db = str(tmp_path / "memory.mnemo.db")
    with MnemoClient(db, "owner", embedder=embedder_of(service, dimension=64)) as client:
        flying = client.remember("the user hates flying").id
        client.remember("pizza for dinner")
        assert [r.record.id for r in client.recall("air travel", mode="semantic", limit=1)] == [flying]
        assert client.verify(embeddings="recompute").ok


def test_the_command_line_takes_it_as_module_attribute(service: FakeService, tmp_path: Any,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "memory.mnemo.db")
    with MnemoClient(db, "owner") as client:
        flying = client.remember("the user hates flying").id
        client.remember("pizza for dinner")
    attribute = "OpenAIEmbedder" if service.api == "openai" else "VoyageEmbedder"
    code = cli_main(["recall", db, "air travel", "--mode", "semantic", "--limit", "1", "--json",
                     "--embedder", f"http_embedders:{attribute}"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, "") and json.loads(out)["id"] == flying


def test_the_example_runs_as_a_command(service: FakeService) -> None:
    env = subprocess_env()
    env.update({"OPENAI_BASE_URL": service.url, "VOYAGE_BASE_URL": service.url,
                "OPENAI_API_KEY": KEY, "VOYAGE_API_KEY": KEY})
    result = subprocess.run([sys.executable, str(EXAMPLES / "http_embedders.py"), service.api,
                             "the user hates flying", "air travel", "pizza"],
                            capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert (result.returncode, result.stderr) == (0, "")
    name = "openai/text-embedding-3-small/1536" if service.api == "openai" else "voyage/voyage-3.5/1024"
    lines = result.stdout.splitlines()
    assert lines[0] == f"{name}: 3 vectors of {1536 if service.api == 'openai' else 1024} float32 values"
    assert lines[1].startswith("'the user hates flying': [") and lines[1].endswith("cosine with the first 1.000")
    assert lines[2].startswith("'air travel': [") and not lines[2].endswith(" 0.000")
    assert lines[3].endswith("cosine with the first 0.000")
