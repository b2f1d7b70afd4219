"""Import the GPU stack's glue as a training run does, so that a pin which breaks an import fails `docker build`
(or this check), not a user's first run.

Fresh interpreters: vLLM and TRL's vLLM glue in one, vLLM's bitsandbytes plugin in another, Unsloth and
unsloth_zoo's vLLM loader in a third. The plugin is imported directly: 4-bit with fast_inference needs it under
vLLM >= 0.28, and `import unsloth` never reaches it on a build machine. They are kept apart because, where no
NVIDIA driver is loaded (a docker build, a CPU machine), `import unsloth` finds vLLM's compiled extension
unloadable and blocks every later vLLM import in its process. Each runs in an
empty temporary folder, since Unsloth writes its compiled cache into the working folder.
Exit status 0 when everything imports, 1 otherwise (the failing import's last lines are printed).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

CHECKS = {
    "vLLM and TRL's vLLM glue": "\n".join(
        [
            "import vllm",
            "from vllm import LLM, SamplingParams",
            "from vllm.engine.arg_utils import EngineArgs",
            "from vllm.inputs import TokensPrompt",
            "import trl.generation.vllm_client, trl.generation.vllm_generation",
            "from trl import GRPOTrainer",
        ]
    ),
    "vLLM's bitsandbytes plugin (4-bit under vLLM >= 0.28)": "\n".join(
        [
            "import bitsandbytes",
            "import vllm_bnb_plugin",
            "import vllm_bnb_plugin.bitsandbytes",
            "from vllm_bnb_plugin import register",
        ]
    ),
    "Unsloth and unsloth_zoo's vLLM loader": "\n".join(
        [
            "from trl import GRPOTrainer",
            "from trl.generation.vllm_client import VLLMClient",
            "import unsloth",
            "from unsloth_zoo.vllm_utils import load_vllm",
        ]
    ),
}


# The collector paused while they import, as an attempt imports them (trainer.backends.collector_paused); it
# otherwise spends about a third of the check walking what the imports have already built
PAUSED = "import gc\ngc.disable()\n"


def check(name: str, code: str) -> bool:
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(
            [sys.executable, "-c", PAUSED + code], cwd=scratch, capture_output=True, text=True, check=False
        )
    if done.returncode == 0:
        print(f"ok: {name}")
        return True
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
    print(f"FAILED: {name} (exit {done.returncode}):\n{tail}", file=sys.stderr)
    return False


def main() -> int:
    results = [check(name, code) for name, code in CHECKS.items()]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
