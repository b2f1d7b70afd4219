"""Running programs on a remote Piston server instead of the local sandbox: the same (program, stdin, limits)
in, the same Run out, every failure of the trip a reason and never an exception.

Piston's API (https://github.com/engineer-man/piston): POST {url}/api/v2/execute with language, version, files
and stdin; the reply's run.stdout, run.code and run.signal say what the program did.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass

from rewards.sandbox import ERROR, KILLED, OK, OUTPUT, UNAVAILABLE, Limits, Run


@dataclass(frozen=True)
class Piston:
    """A remote Piston server (https://github.com/engineer-man/piston) that runs the programs instead:
    POST {url}/api/v2/execute. url may end in /api/v2 or not; timeout_s bounds the whole request (by default
    the wall-clock limit of the run and 10 s for the trip)."""

    url: str
    version: str = "*"
    language: str = "python"
    timeout_s: float | None = None

    def endpoint(self) -> str:
        base = self.url.rstrip("/")
        if not base.endswith("/api/v2"):
            base += "/api/v2"
        return base + "/execute"

    def __call__(self, program: str, stdin: str = "", limits: Limits | None = None, **_: object) -> Run:
        """Run one program remotely; any failure (refused connection, timeout, HTTP error, a reply that is
        not Piston's) is UNAVAILABLE with the reason, never an exception."""
        limits = limits or Limits()
        # Piston's run_timeout is wall-clock milliseconds, capped by the server's own setting (3 s by default)
        run_ms = int(min(limits.wall_s, limits.cpu_s) * 1000)
        body = {
            "language": self.language,
            "version": self.version,
            "files": [{"name": "main.py", "content": program}],
            "stdin": stdin,
            "run_timeout": run_ms,
            "run_memory_limit": int(limits.memory_bytes),
        }
        request = urllib.request.Request(
            self.endpoint(),
            data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s or limits.wall_s + 10.0) as response:
                raw = response.read(limits.output_bytes * 4 + 65536)
            reply = json.loads(raw.decode("utf-8", errors="replace"))
            run = reply["run"]
            stdout = run.get("stdout") or ""
            code = run.get("code")
            signal_name = run.get("signal")
        except urllib.error.HTTPError as error:
            return Run("", UNAVAILABLE, f"piston: HTTP {error.code} from {self.endpoint()}")
        except Exception as error:  # a reward never raises: an unreachable server scores 0 with its reason
            return Run("", UNAVAILABLE, f"piston: {type(error).__name__}: {error}"[:300])
        if not isinstance(stdout, str):
            return Run("", UNAVAILABLE, "piston: run.stdout is not text")
        if len(stdout.encode("utf-8", errors="replace")) > limits.output_bytes:
            return Run(stdout[: limits.output_bytes], OUTPUT, f"printed more than {limits.output_bytes} bytes")
        if signal_name:
            return Run(stdout, KILLED, f"signal {signal_name}")
        if code == 0:
            return Run(stdout, OK, "")
        return Run(stdout, ERROR, f"exit status {code}")
