"""Generation with CTranslate2, a C++ inference engine made for CPUs, behind the backend
interface. Its int8 decoder (weights int8 per output row, activations quantized per token)
reads a quarter of the fp32 weight bytes per decode step, which is what bounds small-batch
decoding on a CPU; `float32` computes exactly what the HF model computes.

How the rollout contract is kept:
- token ids in, token ids out: prompts go in as the vocabulary strings of their ids (CT2's
  vocabulary is the tokenizer's, id for id) and `sequences_ids` are the sampled ids;
- stop strings, EOS and each row's own `max_new_tokens` are decided token by token in the
  step callback (`StopChecker`, as in the HF backend); returning True ends that row at once;
- a continuation is the full prompt again (CT2 keeps no KV cache between calls);
- log-probs: the callback reports the model's untempered log-prob; for rows sampled at a
  temperature other than 1 or with top-p, the step's logits give the tempered ones.
Departure: CT2 samples every row from one random stream per worker thread, seeded when the
engine (re)loads at its first sampled call, here from that call's row seeds. Sampled rows
therefore repeat only when the same calls are made in the same order after a load, and a
row's tokens depend on its batch; only the HF backend gives each row its own generator.
Greedy rows never depend on the batch.

Weight sync does not go through CTranslate2's converter (it reloads the model from disk and
runs a garbage collection per layer: 16-22 s here). `build_spec` fills the decoder spec from
the live module's state dict, int8 rows are quantized with torch, the spec is written to a
RAM-backed temporary directory and loaded from there: about 1-3 s for the 135M model.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from searchrl.models.generation import (
    Generation,
    SamplingParams,
    StopChecker,
    eos_token_ids,
    nucleus,
)
from searchrl.utils.memory import keep_freed_memory

ComputeType = Literal["int8", "float32"]
CT2_INSTALL = "pip install ctranslate2"
SHM = Path("/dev/shm")


class EngineUnavailable(RuntimeError):
    """CTranslate2 is not installed or cannot run this model; the caller falls back to HF."""


def _ctranslate2() -> Any:
    try:
        import ctranslate2
    except ImportError as err:
        raise EngineUnavailable(f"ctranslate2 is not installed ({CT2_INSTALL})") from err
    return ctranslate2


def _rope_theta(config: Any) -> float:
    parameters = getattr(config, "rope_parameters", None) or {}
    theta = parameters.get("rope_theta", getattr(config, "rope_theta", 10_000.0))
    if parameters.get("rope_type", "default") != "default":
        raise EngineUnavailable(f"rope scaling {parameters['rope_type']!r} is not mapped to CT2")
    return float(theta)


def build_spec(module: torch.nn.Module, vocabulary: list[str], compute: ComputeType) -> Any:
    """A CT2 decoder spec holding `module`'s current weights (Llama-style architectures:
    RMSNorm, SwiGLU, rotary, grouped-query attention, optional q/k/v biases)."""
    specs = _ctranslate2().specs
    config = module.config  # type: ignore[attr-defined]
    if config.model_type not in ("llama", "qwen2", "mistral"):
        raise EngineUnavailable(f"no CT2 mapping for model type {config.model_type!r}")
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    spec = specs.TransformerDecoderModelSpec.from_config(
        config.num_hidden_layers,
        heads,
        activation=specs.common_spec.Activation.SWISH,
        pre_norm=True,
        ffn_glu=True,
        rms_norm=True,
        rotary_dim=0,
        rotary_interleave=False,
        rotary_base=_rope_theta(config),
        num_heads_kv=None if kv_heads == heads else kv_heads,
    )
    state = {name: _whole(tensor.detach()) for name, tensor in module.state_dict().items()}
    decoder = spec.decoder
    decoder.scale_embeddings = False
    decoder.embeddings.weight = state["model.embed_tokens.weight"].float()
    decoder.layer_norm.gamma = state["model.norm.weight"].float()
    for i, layer in enumerate(decoder.layer):
        prefix = f"model.layers.{i}."

        def weight(name: str, prefix: str = prefix) -> torch.Tensor:
            return state[prefix + name + ".weight"]

        layer.self_attention.layer_norm.gamma = weight("input_layernorm").float()
        layer.ffn.layer_norm.gamma = weight("post_attention_layernorm").float()
        qkv = torch.cat([weight(f"self_attn.{p}_proj") for p in "qkv"])
        _set_linear(layer.self_attention.linear[0], qkv, compute)
        biases = [state.get(f"{prefix}self_attn.{p}_proj.bias") for p in "qkv"]
        if all(b is not None for b in biases):
            layer.self_attention.linear[0].bias = torch.cat(biases).float()  # type: ignore[arg-type]
        _set_linear(layer.self_attention.linear[1], weight("self_attn.o_proj"), compute)
        _set_linear(layer.ffn.linear_0, weight("mlp.gate_proj"), compute)
        _set_linear(layer.ffn.linear_0_noact, weight("mlp.up_proj"), compute)
        _set_linear(layer.ffn.linear_1, weight("mlp.down_proj"), compute)
    head = state.get("lm_head.weight", state["model.embed_tokens.weight"])
    _set_linear(decoder.projection, head, compute)
    spec.register_vocabulary(vocabulary)
    spec.config.bos_token = vocabulary[config.bos_token_id or 0]
    eos = config.eos_token_id if isinstance(config.eos_token_id, int) else 0
    spec.config.eos_token = vocabulary[eos]
    spec.config.unk_token = vocabulary[0]
    spec.config.layer_norm_epsilon = config.rms_norm_eps
    spec.validate()
    return spec


def _whole(tensor: torch.Tensor) -> torch.Tensor:
    """A sharded (FSDP DTensor) weight gathered whole; every rank syncs at the same time."""
    gather = getattr(tensor, "full_tensor", None)
    return gather() if callable(gather) else tensor


def _set_linear(spec: Any, weight: torch.Tensor, compute: ComputeType) -> None:
    """fp32 weights, or CT2's int8 layout: one scale per output row, `round(w · 127/amax)`."""
    weight = weight.float()
    if compute == "float32":
        spec.weight = weight.contiguous()
        return
    amax = weight.abs().amax(dim=1).clamp(min=1e-12)  # [out]
    scale = 127.0 / amax
    spec.weight = torch.round(weight * scale[:, None]).to(torch.int8).contiguous()
    spec.weight_scale = scale.contiguous()


class CT2Backend:
    """`GenerationBackend` over a `ctranslate2.Generator` built from a torch module."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        compute_type: ComputeType = "int8",
        max_batch_size: int = 32,
        threads: int = 0,
    ):
        keep_freed_memory()
        self.tokenizer = tokenizer
        self.compute_type: ComputeType = compute_type
        self.max_batch_size = max_batch_size
        self.threads = threads if threads > 0 else torch.get_num_threads()
        size = int(model.config.vocab_size)  # type: ignore[attr-defined]
        tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
        self._vocab = [t if t is not None else f"<extra_id_{i}>" for i, t in enumerate(tokens)]
        if len(set(self._vocab)) != size:
            raise EngineUnavailable("the tokenizer's vocabulary strings are not unique")
        self._eos_ids = eos_token_ids(tokenizer, model)
        self.generator: Any = None
        self._seeded = False
        self.last_sync_s = 0.0
        self.sync_weights(model)

    def sync_weights(self, source: torch.nn.Module) -> None:
        """Rebuild the engine from `source`'s current weights (timed in `last_sync_s`)."""
        ctranslate2 = _ctranslate2()
        started = time.perf_counter()
        spec = build_spec(source, self._vocab, self.compute_type)
        parent = str(SHM) if SHM.is_dir() else None
        with tempfile.TemporaryDirectory(prefix="searchrl-ct2-", dir=parent) as directory:
            spec.save(directory)
            del spec
            self.generator = ctranslate2.Generator(
                directory, device="cpu", compute_type=self.compute_type, intra_threads=self.threads
            )
        self._seeded = False
        self.last_sync_s = time.perf_counter() - started

    def generate(
        self, prompts: Sequence[Sequence[int]], params: Sequence[SamplingParams]
    ) -> list[Generation]:
        """Rows sharing sampling settings go through one CT2 call per `max_batch_size` rows,
        longest prompts first: CT2 orders a batch that way itself (stably), so its batch
        order is ours, and rows of similar length share a call (CT2 feeds the part of a
        prompt longer than the shortest in its batch one step at a time)."""
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling params")
        results: list[Generation | None] = [
            Generation([], [], "", "length") if p.max_new_tokens <= 0 else None for p in params
        ]
        groups: dict[tuple[float, float], list[int]] = {}
        for i, p in enumerate(params):
            if results[i] is None:
                key = (0.0, 1.0) if p.temperature <= 0 else (p.temperature, p.top_p)
                groups.setdefault(key, []).append(i)
        for rows in groups.values():
            rows.sort(key=lambda i: -len(prompts[i]))
            for start in range(0, len(rows), self.max_batch_size):
                chunk = rows[start : start + self.max_batch_size]
                outputs = self._generate_batch(
                    [prompts[i] for i in chunk], [params[i] for i in chunk]
                )
                for i, output in zip(chunk, outputs, strict=True):
                    results[i] = output
        return [r for r in results if r is not None]

    def _generate_batch(
        self, prompts: list[Sequence[int]], params: list[SamplingParams]
    ) -> list[Generation]:
        ctranslate2 = _ctranslate2()
        first = params[0]
        greedy = first.temperature <= 0
        tempered = not greedy and (first.temperature != 1.0 or first.top_p < 1.0)
        decode = _Decoder(self.tokenizer)
        rows = [_Row(StopChecker(decode, self._eos_ids, p)) for p in params]
        tempering = _Tempering(first, len(rows)) if tempered else None
        errors: list[BaseException] = []

        def on_token(step: Any) -> bool:
            # Runs on CT2's worker thread: it must not hold the backend (dropping the last
            # reference there would join that thread from itself), and an exception escaping
            # into the C++ loop aborts the process, so it is kept and the row stopped.
            try:
                row = rows[step.batch_id]
                if row.done:
                    return True
                logprob = step.log_prob
                if tempering is not None:
                    logprob = tempering.logprob(step)
                finished = row.push(step.token_id, float(logprob), decode)
                if finished and tempering is not None:
                    tempering.finish(step.batch_id, step.step)
                return finished
            except BaseException as err:
                errors.append(err)
                return True

        if not greedy and not self._seeded:
            ctranslate2.set_random_seed(_call_seed([p.seed for p in params]))
            self._seeded = True
        self.generator.generate_batch(
            [[self._vocab[t] for t in prompt] for prompt in prompts],
            max_length=max(p.max_new_tokens for p in params),
            include_prompt_in_result=False,
            end_token=sorted(self._eos_ids),
            return_end_token=True,
            return_scores=True,
            sampling_topk=1 if greedy else 0,
            sampling_topp=1.0 if greedy else first.top_p,
            sampling_temperature=1.0 if greedy else first.temperature,
            return_logits_vocab=tempered,
            callback=on_token,
        )
        if errors:
            raise errors[0]
        return [row.finished() for row in rows]


class _Decoder:
    """`tokenizer.decode` with special tokens kept (a plain object the callback may hold)."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer

    def __call__(self, token_ids: list[int]) -> str:
        return self._tokenizer.decode(token_ids, skip_special_tokens=False)


class _Row:
    """One row's tokens, log-probs and stop decision, filled by the step callback."""

    def __init__(self, checker: StopChecker):
        self.checker = checker
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.result: Generation | None = None

    @property
    def done(self) -> bool:
        return self.result is not None

    def push(self, token: int, logprob: float, decode: Any) -> bool:
        """Add one token; True (end this row) once a stop rule fires."""
        self.tokens.append(token)
        self.logprobs.append(logprob)
        stopped = self.checker.check(self.tokens)
        if stopped is not None:
            self.result = Generation(self.tokens, self.logprobs, decode(self.tokens), *stopped)
        return stopped is not None

    def finished(self) -> Generation:
        if self.result is None:
            raise RuntimeError("CT2 ended a row that no stop rule had ended")
        return self.result


class _Tempering:
    """Log-probs under softmax(logits / T) within the top-p nucleus. CT2 hands the logits of
    the whole active batch ([active rows, vocab]: rows in CT2's order, longest prompt first,
    which `generate` makes ours; finished rows gone) to the first callback of each step
    only, so they are kept for the step's other rows."""

    def __init__(self, params: SamplingParams, rows: int):
        self.params = params
        self.ended_at = [None] * rows  # type: list[int | None]
        self.step = -1
        self.logits: torch.Tensor | None = None

    def finish(self, row: int, step: int) -> None:
        """`row` leaves the batch after `step`."""
        self.ended_at[row] = step

    def logprob(self, result: Any) -> float:
        if result.step != self.step:
            self.step, self.logits = result.step, None
        if self.logits is None and list(result.logits.shape):
            self.logits = torch.from_numpy(np.array(result.logits, dtype=np.float32))
        if self.logits is None:
            raise RuntimeError(f"CT2 gave no logits at step {result.step}")
        active = [i for i, end in enumerate(self.ended_at) if end is None or end >= self.step]
        row = self.logits[active.index(result.batch_id)][None, :] / self.params.temperature
        probs = torch.softmax(row, dim=-1)  # [1, vocab]
        if self.params.top_p < 1.0:
            probs = nucleus(probs, torch.tensor([self.params.top_p]))
            probs = probs / probs.sum()
        return float(probs[0, result.token_id].clamp(min=1e-30).log())


def _call_seed(seeds: Sequence[int]) -> int:
    """One 32-bit seed for CT2's stream, from the rows' seeds of the call that starts it."""
    digest = hashlib.blake2b(repr(list(seeds)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")
