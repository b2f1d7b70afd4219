"""What one plain-TRL GRPO training step holds in GPU memory, simulated on CPU with fake tensors.

The model is built from its architecture on the meta device (PEFT applied there), its parameters are swapped
for FakeTensors on "cpu" (fake "cuda" aborts a CPU-only torch), and one step runs for real: the backbone
under bf16 autocast, TRL 1.15's chunked LM head and its GRPO loss, backward, gradient clipping and AdamW.
A dispatch mode records every storage created and its release, so the peak of live bytes and what made up
each phase can be read back. No memory is allocated and no GPU is needed.

Stand-ins for what the GPU would do: scaled_dot_product_attention is routed to the flash kernel (no mask)
or the memory-efficient kernel with an additive bias (mask), as a GPU build picks them; TRL's head imports
Triton, so a stub whose kernel launches allocate nothing takes its place (the kernels keep their state in
buffers the Python code allocates, which are counted). The optimizer state is created before the step
(as from an earlier step) so that the step's peak holds it.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
import weakref
from contextlib import contextmanager
from dataclasses import dataclass

# torch's AdamW and clip_grad_norm_ take their multi-tensor (foreach) path on CUDA tensors by default
FOREACH = True
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _import_trl_head():
    """TRL's chunked head (its autograd function and tile width), imported against a `triton` stub whose jitted
    kernels launch as no-ops: enough for its Python to run. The stub is withdrawn afterwards so that torch's
    compiler, imported first, keeps seeing no Triton."""
    import torch._dynamo  # noqa: F401 - imported before the stub exists
    import transformers.trainer  # noqa: F401

    if "triton" not in sys.modules:
        _install_triton_stub()
    try:
        from trl.kernels import chunked_logprob
        from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE
    finally:
        for name in ("triton", "triton.language"):
            if isinstance(sys.modules.get(name), types.ModuleType) and getattr(sys.modules[name], "_stub", False):
                del sys.modules[name]
    return chunked_logprob, _CHUNKED_LOGPROB_CHUNK_SIZE


def _install_triton_stub() -> None:

    class Anything(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return Anything(name)

        def __call__(self, *args, **kwargs):
            if len(args) == 1 and callable(args[0]) and not kwargs:
                return Kernel()
            return lambda fn: Kernel()

    class Kernel:
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    triton = Anything("triton")
    language = Anything("triton.language")
    for name, module in (("triton", triton), ("triton.language", language)):
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__version__ = "3.3.0"
        module._stub = True
        sys.modules[name] = module
    triton.language = language
    triton.jit = lambda fn=None, **kw: Kernel() if fn is not None else (lambda f: Kernel())
    triton.cdiv = lambda a, b: -(-a // b)
    language.constexpr = type("constexpr", (), {})


def hf_config(arch):
    """A transformers config of the catalogue's architecture (no download)."""
    import transformers

    classes = {
        "llama": "LlamaConfig",
        "qwen2": "Qwen2Config",
        "qwen3": "Qwen3Config",
        "mistral": "MistralConfig",
        "gemma3_text": "Gemma3TextConfig",
        "gemma3": "Gemma3TextConfig",
    }
    config_class = getattr(transformers, classes.get(arch.family, "LlamaConfig"))
    config = config_class(
        vocab_size=arch.vocab,
        hidden_size=arch.hidden,
        intermediate_size=arch.intermediate,
        num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads,
        num_key_value_heads=arch.kv_heads,
        head_dim=arch.head_dim,
        tie_word_embeddings=arch.tied_embeddings,
        max_position_embeddings=32768,
    )
    config._attn_implementation = "sdpa"
    return config


class StorageLog:
    """A TorchDispatchMode (made in `counting`) records here each storage created and released, in order."""

    def __init__(self):
        self.events: list[tuple[int, int, str]] = []  # (uid, +bytes or -bytes, phase)
        self.live: dict[int, int] = {}  # storage address -> uid
        self.size: dict[int, int] = {}
        self.phase = "setup"
        self.sums: dict[int, tuple[int, int]] = {}  # uid of an add's result -> uids of its operands
        self._next = 0

    def track(self, tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self.live:
            return
        uid, self._next = self._next, self._next + 1
        self.live[key] = uid
        self.size[uid] = storage.nbytes()
        self.events.append((uid, self.size[uid], self.phase))
        weakref.finalize(storage, self._release, key, uid)

    def _release(self, key: int, uid: int) -> None:
        if self.live.get(key) == uid:
            del self.live[key]
            self.events.append((uid, -self.size[uid], self.phase))

    def uid_of(self, tensor) -> int:
        return self.live[tensor.untyped_storage()._cdata]


@contextmanager
def counting(log: StorageLog):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.add.Tensor and all(isinstance(a, torch.Tensor) for a in args[:2]):
                log.track(out)
                log.sums[log.uid_of(out)] = (log.uid_of(args[0]), log.uid_of(args[1]))
            for value in tree_flatten(out)[0]:
                if isinstance(value, torch.Tensor):
                    log.track(value)
            return out

    with Mode():
        yield


def _routed_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA as a GPU runs it: flash attention without a mask, memory-efficient attention with an additive
    bias in the query's dtype (a boolean mask is converted per call, as torch does) with a mask."""
    import torch

    if key.shape[1] != query.shape[1]:
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    aten = torch.ops.aten
    if attn_mask is None:
        return aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    if attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill_(attn_mask.logical_not(), float("-inf"))
    bias = attn_mask.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    return aten._scaled_dot_product_efficient_attention(
        query, key, value, bias, True, dropout_p, is_causal, scale=scale
    )[0]


@dataclass
class Simulated:
    """Bytes of each part of one step, and the peak of all live bytes."""

    weights: int  # frozen parameters and buffers (every parameter is trained in full fine-tuning)
    lora: int  # trained parameters when LoRA (0 in full fine-tuning)
    trained: int  # trained parameters (LoRA adapters or the whole model)
    gradients: int
    optimizer: int
    stored: int  # what the backbone's forward keeps for backward: activations, or the checkpoints
    recompute: int  # live bytes made in the backbone's backward besides gradients (recompute, grad flow)
    head: int  # live bytes made by the LM head and the loss, forward and backward, besides gradients
    peak: int
    peak_phase: str


def _build(arch, lora_rank: int, checkpointing: bool, fake_mode):
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf_config(arch), dtype=torch.bfloat16)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lora_rank:
        from peft import LoraConfig, get_peft_model

        if checkpointing:
            model.enable_input_require_grads()
        model = get_peft_model(
            model,
            LoraConfig(
                r=lora_rank,
                lora_alpha=2 * lora_rank,
                lora_dropout=0.0,
                target_modules=list(LORA_MODULES),
                bias="none",
                task_type="CAUSAL_LM",
            ),
        )
    swapped: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for table in (module._parameters, module._buffers):
            for name, tensor in list(table.items()):
                if tensor is None:
                    continue
                if id(tensor) not in swapped:
                    with fake_mode:
                        fake = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="cpu")
                    if isinstance(tensor, torch.nn.Parameter):
                        fake = torch.nn.Parameter(fake, requires_grad=tensor.requires_grad)
                    swapped[id(tensor)] = fake
                table[name] = swapped[id(tensor)]
    model.train()
    return model


def simulate(
    arch, *, lora_rank: int = 16, checkpointing: bool = False, batch: int = 2, prompt: int = 256, completion: int = 768
) -> Simulated:
    """One GRPO step of plain TRL + PEFT (or full fine-tuning when lora_rank is 0), bf16, AdamW."""
    chunked_logprob, _CHUNKED_LOGPROB_CHUNK_SIZE = _import_trl_head()
    import torch
    import transformers.masking_utils as masking
    from torch._subclasses.fake_tensor import FakeTensorMode

    saved = (
        chunked_logprob._addmm_fp32,
        masking.find_packed_sequence_indices,
        torch.nn.functional.scaled_dot_product_attention,
    )
    # On a GPU the fp32 accumulation reads bf16 tiles in place (addmm with out_dtype); the CPU fallback's fp32
    # copies would not be there. Under FakeTensor transformers looks for packed sequences by reading values;
    # there are none.
    chunked_logprob._addmm_fp32 = lambda acc, a, b: None
    masking.find_packed_sequence_indices = lambda *args, **kwargs: None
    torch.nn.functional.scaled_dot_product_attention = _routed_sdpa
    fake_mode = FakeTensorMode()
    try:
        model = _build(arch, lora_rank, checkpointing, fake_mode)
        return _step(
            model,
            arch,
            fake_mode,
            batch,
            prompt,
            completion,
            _CHUNKED_LOGPROB_CHUNK_SIZE,
            chunked_logprob.ChunkedLogProbFunction,
        )
    finally:
        (
            chunked_logprob._addmm_fp32,
            masking.find_packed_sequence_indices,
            torch.nn.functional.scaled_dot_product_attention,
        ) = saved


def _step(model, arch, fake_mode, batch, prompt, completion, chunk, head_function) -> Simulated:
    """Run the step under the counter and read the parts back (long: one pass, its phases marked in order)."""
    import torch

    trained = [p for p in model.parameters() if p.requires_grad]
    causal = model.get_base_model() if hasattr(model, "get_base_model") else model
    log = StorageLog()
    seq = prompt + completion
    with fake_mode, counting(log):
        for tensor in list(model.parameters()) + list(model.buffers()):
            log.track(tensor)
        optimizer = torch.optim.AdamW(trained, lr=1e-6, foreach=FOREACH)
        for p in trained:  # state as an earlier step left it
            p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        state_uids = {log.uid_of(t) for s in optimizer.state.values() for t in s.values() if t.dim() > 0}

        input_ids = torch.zeros((batch, seq), dtype=torch.long)
        attention_mask = torch.ones((batch, seq), dtype=torch.long)
        advantages = torch.zeros((batch,), dtype=torch.float32)
        log.phase = "forward"
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = causal.base_model(
                input_ids=input_ids, attention_mask=attention_mask, use_cache=False
            ).last_hidden_state
            log.phase = "head"
            hidden.register_hook(lambda grad: setattr(log, "phase", "backward"))
            scored = torch.cat([hidden[i, seq - 1 - completion : seq - 1] for i in range(batch)])
            targets = torch.zeros((batch * completion,), dtype=torch.long)
            weight = causal.get_output_embeddings().weight
            logps, _entropy, *_ = head_function.apply(
                scored,
                weight,
                None,
                targets,
                1.0,
                chunk,
                getattr(causal.config, "final_logit_softcapping", None),
                1.0,
                ("log_probs", "entropy"),
            )
        logps = logps.view(batch, completion)
        ratio = torch.exp(logps - logps.detach())
        loss = -(ratio * advantages[:, None]).sum() / (batch * completion)
        loss.backward()
        log.phase = "optimizer"
        final = {log.uid_of(p.grad) for p in trained if p.grad is not None}
        gradients = sum(log.size[u] for u in final)
        torch.nn.utils.clip_grad_norm_(trained, 1.0, foreach=FOREACH)
        optimizer.step()
    # Autograd sums two gradients of one tensor (a tied weight) in place on real tensors; on a FakeTensor out
    # of place. Count the sum in its first operand's storage, as a GPU does.
    in_place = {u: log.sums[u][0] for u in final if u in log.sums}
    kept = set(in_place.values())
    log.events = [e for e in log.events if not ((e[1] > 0 and e[0] in in_place) or (e[1] < 0 and e[0] in kept))]
    grad_uids = final | kept
    return _read_back(log, model, trained, state_uids, grad_uids, gradients, lora=hasattr(model, "get_base_model"))


def _read_back(log, model, trained, state_uids, grad_uids, gradients, lora) -> Simulated:
    params = {p.untyped_storage()._cdata: p for p in list(model.parameters()) + list(model.buffers())}
    trained_bytes = sum(p.untyped_storage().nbytes() for p in {id(p): p for p in trained}.values())
    all_bytes = sum(p.untyped_storage().nbytes() for p in params.values())
    optimizer = sum(log.size[u] for u in state_uids)
    phase_of: dict[int, str] = {}
    live = {"forward": 0, "head": 0, "backward": 0}
    best = {"forward_end": 0, "head": 0, "backward": 0}
    total = peak = 0
    peak_phase = ""
    previous = "setup"
    for uid, delta, phase in log.events:
        if delta > 0:
            phase_of[uid] = phase
        made = phase_of.get(uid, "setup")
        total += delta
        if total > peak:
            peak, peak_phase = total, phase
        if previous == "forward" and phase != "forward":
            best["forward_end"] = live["forward"]
        previous = phase
        if uid in grad_uids or uid in state_uids or made not in live:
            continue
        live[made] += delta
        if made in best:
            best[made] = max(best[made], live[made])
    return Simulated(
        weights=all_bytes - (trained_bytes if lora else 0),
        lora=trained_bytes if lora else 0,
        trained=trained_bytes,
        gradients=gradients,
        optimizer=optimizer,
        stored=best["forward_end"],
        recompute=best["backward"],
        head=best["head"],
        peak=peak,
        peak_phase=peak_phase,
    )


def main(argv=None) -> int:
    """Simulate configurations given as JSON ([[model, lora_rank, checkpointing, batch, prompt, completion],
    ...]) and print their parts as JSON: a fresh process keeps the stand-ins away from anything else."""
    import json
    import os

    import torch

    from profiles.catalog import resolve

    torch.set_num_threads(int(os.environ.get("SIMULATION_THREADS", "2")))
    configs = json.loads(argv[0] if argv else sys.argv[1])
    out = [
        simulate(
            resolve(model), lora_rank=rank, checkpointing=gc, batch=batch, prompt=prompt, completion=completion
        ).__dict__
        for model, rank, gc, batch, prompt, completion in configs
    ]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
