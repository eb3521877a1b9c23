"""Our lines on the terminal, not the libraries': what the `searchrl` command does before any of
them is imported.

Without it a `make demo` printed ~20 lines from vLLM alone (its INFO lines for every engine
start, "RotaryEmbedding: Failed to load weights" after every weight sync: vLLM's in-place
reload reports the rotary buffers, which have no weights to load), FutureWarnings from its
Triton shim, torch's C++ "NUMA binding" warning, and transformers' progress bars for loading a
135M model. Each library reads its own switch from the environment when it is first imported,
so they are set here, once, and only where the user has not set them: `SEARCHRL_VERBOSE=1`
(or the `--debug` flag) leaves every library as it is.
"""

from __future__ import annotations

import logging
import os
import warnings

VERBOSE_ENV = "SEARCHRL_VERBOSE"

QUIET = {
    "VLLM_LOGGING_LEVEL": "ERROR",
    "TORCH_CPP_LOG_LEVEL": "ERROR",
    "TRANSFORMERS_VERBOSITY": "error",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",
}
"""Environment switches (library: what it silences): vLLM's logger, torch's C++ warnings,
transformers' logger and advisories, the hub's and tqdm's progress bars (ours are rich's)."""


def quiet_libraries(verbose: bool = False) -> None:
    """Silence the libraries' logging, warnings and progress bars (not errors), unless
    `verbose` or `SEARCHRL_VERBOSE` is set. Call before importing them."""
    if verbose or os.environ.get(VERBOSE_ENV, "") not in ("", "0"):
        return
    for name, value in QUIET.items():
        os.environ.setdefault(name, value)
    # vLLM's warnings at import ("Triton is installed, but doesn't include CPU backend") go
    # through loggers it has not configured yet, so its level variable does not reach them.
    logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"])
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm(\.|$)")
    warnings.filterwarnings("ignore", category=UserWarning, module=r"vllm(\.|$)")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
