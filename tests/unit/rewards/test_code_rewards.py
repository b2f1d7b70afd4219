"""Code rewards: open-r1's `code`, `binary_code` and `code_format` on its data layout, exact scores, hostile
programs scoring 0, the Piston option, and "never raises"."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rewards import REWARDS, describe, execution
from rewards.execution import (
    SANDBOX_URL_ENV,
    binary_code,
    code,
    code_format,
    extract_code,
    outputs_match,
    read_verification_info,
)
from rewards.sandbox import Limits

ADD = "a, b = map(int, input().split())\nprint(a + b)"
CASES = [
    {"type": "stdin_stdout", "input": "1 2\n", "output": "3\n", "fn_name": None},
    {"type": "stdin_stdout", "input": "10 5\n", "output": "15\n", "fn_name": None},
]
INFO = {"language": "python", "test_cases": CASES}


def answer(program: str, lang: str = "python") -> str:
    return f"<think>\nadd them\n</think>\n<answer>\n```{lang}\n{program}\n```\n</answer>"


def chat(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


@pytest.fixture(autouse=True)
def short_limits(monkeypatch):
    monkeypatch.setattr(execution, "LIMITS", Limits(wall_s=1.5, cpu_s=1))
    monkeypatch.delenv(SANDBOX_URL_ENV, raising=False)


# ---------------------------------------------------------------- registry


@pytest.mark.parametrize("name", ["code", "binary_code", "code_format"])
def test_registered_by_open_r1_names(name):
    assert REWARDS[name].__name__ == name
    assert "\n" not in describe()[name]


# ---------------------------------------------------------------- reading


def test_extract_code_takes_the_last_python_block():
    text = "```python\nprint(1)\n```\nthen\n```python\nprint(2)\n```"
    assert extract_code(text) == "print(2)\n"
    assert extract_code(chat(text)) == "print(2)\n"
    assert extract_code("```py\nprint(1)\n```") == ""
    assert extract_code("no code") == ""
    assert extract_code(None) == ""
    assert extract_code("```cpp\nint main(){}\n```", "cpp") == "int main(){}\n"


def test_verification_info_as_open_r1_writes_it_dict_or_json():
    tests = [("1 2\n", "3\n"), ("10 5\n", "15\n")]
    assert read_verification_info(INFO) == ("python", tests)
    assert read_verification_info(json.dumps(INFO)) == ("python", tests)
    assert read_verification_info({"test_cases": json.dumps(CASES)}) == ("python", tests)
    odd = {"test_cases": [CASES[0], {"type": "function_call", "input": "1", "output": "2"}, {"input": 1}]}
    assert read_verification_info(odd) == ("python", [("1 2\n", "3\n"), None, None])
    bad: list[object] = [None, "not json", {}, {"test_cases": []}, {"language": 5, "test_cases": CASES}, [INFO]]
    for info in bad:
        assert read_verification_info(info) is None


@pytest.mark.parametrize(
    "actual, expected, match",
    [
        ("3\n", "3\n", True),
        ("3   \n\n", "3", True),
        ("1\r\n2\n", "1\n2\n", True),
        ("  1 2 \n3", "1 2\n  3  \n", True),
        ("1\n", "1\n2\n", False),  # open-r1's zip would pass this prefix
        ("1\n2\n3\n", "1\n2\n", False),
        ("", "0\n", False),
        ("1 2", "1  2", False),
    ],
)
def test_outputs_compare_line_by_line_stripped(actual, expected, match):
    assert outputs_match(actual, expected) is match


# ---------------------------------------------------------------- code and binary_code


def test_scores_are_the_share_of_tests_passed():
    half = "a, b = map(int, input().split())\nprint(a + b if a == 1 else 0)"
    completions = [answer(ADD), answer(half), answer("print("), "no code block", chat(answer(ADD))]
    infos = [INFO, INFO, INFO, INFO, json.dumps(INFO)]
    assert code(completions, verification_info=infos) == [1.0, 0.5, 0.0, 0.0, 1.0]
    assert binary_code(completions, verification_info=infos) == [1.0, 0.0, 0.0, 0.0, 1.0]


def test_binary_code_follows_open_r1s_threshold(monkeypatch):
    monkeypatch.setattr(execution, "_safe_pass_rates", lambda completions, info: [1.0, 0.995, 0.99, 0.5, 0.0])
    assert binary_code(["a"] * 5, verification_info=[INFO] * 5) == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_a_case_this_runner_cannot_feed_counts_as_failed():
    info = {"language": "python", "test_cases": [CASES[0], {"type": "function_call", "fn_name": "f"}]}
    assert code([answer(ADD)], verification_info=[info]) == [0.5]


def test_rows_without_tests_or_language_the_sandbox_runs_score_zero():
    cpp = {"language": "cpp", "test_cases": CASES}
    completions = [answer(ADD), answer(ADD), answer("int main(){}", "cpp"), answer(ADD)]
    assert code(completions, verification_info=[None, {"test_cases": []}, cpp]) == [0.0, 0.0, 0.0, 0.0]
    assert code([answer(ADD)]) == [0.0]


def test_the_trl_calling_convention():
    kwargs = dict(
        prompts=[[{"role": "user", "content": "add"}]] * 2,
        completions=[chat(answer(ADD)), chat("none")],
        completion_ids=[[1]] * 2,
        verification_info=[INFO, INFO],
        trainer_state=object(),
        log_extra=lambda *a: None,
    )
    assert code(**kwargs) == [1.0, 0.0]
    assert binary_code(**kwargs) == [1.0, 0.0]
    assert code_format(**kwargs) == [1.0, 0.0]


HOSTILE = {
    "fork bomb": "import os\nwhile True:\n    os.fork()",
    "busy loop": "while True:\n    pass",
    "sleep": "import time\ntime.sleep(10**6)",
    "os.system": "import os\nos.system('echo 3')",
    "subprocess": "import subprocess\nsubprocess.run(['echo', '3'])",
    "/etc/passwd": "print(open('/etc/passwd').read())",
    "kill the parent": "import os\nos.kill(os.getppid(), 9)",
    "huge output": "print('3' * 100_000_000)",
    "4 GB": "x = bytearray(4 * 1024**3)\nprint(3)",
    "network": "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9')\nprint(3)",
}


def test_hostile_programs_score_zero_and_the_run_goes_on():
    names = list(HOSTILE)
    completions = [answer(HOSTILE[name]) for name in names] + [answer(ADD)]
    one_test = {"language": "python", "test_cases": CASES[:1]}
    scores = code(completions, verification_info=[one_test] * len(completions))
    assert dict(zip(names + ["honest"], scores)) == {**dict.fromkeys(names, 0.0), "honest": 1.0}


def test_a_batch_scores_as_its_completions_one_by_one():
    half = "a, b = map(int, input().split())\nprint(a + b if a == 1 else 0)"
    completions = [answer(ADD), answer(half), answer("import os\nos.system('x')"), "none", answer(ADD)]
    together = code(completions, verification_info=[INFO] * 5)
    alone = [code([c], verification_info=[INFO])[0] for c in completions]
    assert together == alone == [1.0, 0.5, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("completions", [None, [], "", 5, object(), [None, 5, {}]])
@pytest.mark.parametrize("name", ["code", "binary_code", "code_format"])
def test_never_raises_on_odd_batches(name, completions):
    scores = REWARDS[name](completions, verification_info=object())
    assert isinstance(scores, list) and all(s == 0.0 for s in scores)


@pytest.mark.parametrize("name, score", [("code", 0.0), ("binary_code", 0.0), ("code_format", 1.0)])
def test_an_iterator_of_completions_is_read_as_its_batch(name, score):
    # made in the test, not shared between parametrized cases: a consumed iterator would read as no batch
    assert REWARDS[name](iter([answer(ADD)]), verification_info=object()) == [score]  # no tests readable


def test_a_failing_sandbox_scores_zero(monkeypatch):
    import rewards.sandbox

    def broken(*args, **kwargs):
        raise OSError("no more processes")

    monkeypatch.setattr(rewards.sandbox, "run_many", broken)
    assert code([answer(ADD), "x"], verification_info=[INFO, INFO]) == [0.0, 0.0]


# ---------------------------------------------------------------- code_format


@pytest.mark.parametrize(
    "text, score",
    [
        (answer(ADD), 1.0),
        (answer(ADD) + "\n", 1.0),
        ("<think>\nx\n</think>\n\n<answer>\n```python\nprint(1)```\n</answer>", 1.0),
        ("<think>\nx\n</think>\n<answer>\nsee:\n```python\nprint(1)\n```\ndone\n</answer>", 1.0),
        ("<think>\nx\n</think>\n<answer>\nprint(1)\n</answer>", 0.0),
        ("<think>\nx\n</think>\n<answer>\n```cpp\nint x;\n```\n</answer>", 0.0),
        ("<think>\nx\n</think>\n<answer>\n```python\nprint(1)\n</answer>", 0.0),
        ("```python\nprint(1)\n```", 0.0),
        (answer(ADD) + " trailing", 0.0),
        ("<think>\n\n</think>\n<answer>\n```python\n1\n```\n</answer>", 1.0),
        ("<think></think>\n<answer>\n```python\n1\n```\n</answer>", 0.0),
    ],
)
def test_code_format_as_open_r1(text, score):
    assert code_format([text]) == [score]
    assert code_format([chat(text)], verification_info=[INFO]) == [score]


def test_code_format_reads_the_rows_language():
    cpp = answer("int main(){}", "cpp")
    assert code_format([cpp, cpp], verification_info=[{"language": "cpp", "test_cases": CASES}, INFO]) == [1.0, 0.0]
    assert code_format([cpp, cpp], language=["cpp", "python"]) == [1.0, 0.0]


def test_code_format_is_fast_on_a_completion_full_of_fences():
    # The think block may hold "</think>" itself (open-r1's lazy pattern): only the last one opens the answer
    text = "<think>\n" + "\n</think>\n" * 3000 + "<answer>\n" + "```python```\n" * 5000 + "x"
    start = time.process_time()
    assert code_format([text, text + "\n</answer>", text.replace("```python", "```") + "\n</answer>"]) == [
        0.0,
        1.0,
        0.0,
    ]
    assert time.process_time() - start < 5.0


# ---------------------------------------------------------------- Piston


class _Piston(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        a, b = map(int, body["stdin"].split())
        program = body["files"][0]["content"]
        if "fail" in program:
            self.send_response(500)
            self.end_headers()
            return
        reply = json.dumps({"run": {"stdout": f"{a + b}\n", "code": 0, "signal": None}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def test_a_piston_url_in_the_environment_runs_there(monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Piston)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv(SANDBOX_URL_ENV, f"http://127.0.0.1:{server.server_address[1]}")
        cpp = {"language": "cpp", "test_cases": CASES}
        completions = [answer("anything"), answer("fail"), answer("int main(){}", "cpp"), "no code"]
        assert code(completions, verification_info=[INFO, INFO, cpp, INFO]) == [1.0, 0.0, 1.0, 0.0]
    finally:
        server.shutdown()
        server.server_close()
