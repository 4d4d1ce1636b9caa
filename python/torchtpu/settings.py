"""The Python layer's engine switches, read from the environment once.

The lowerings and the optimizer hooks consult these instead of os.environ,
so every switch is named (and documented) in one place. Each is on unless
its variable is set to "0":

  TORCHTPU_FUSED_ATTENTION    scaled_dot_product_attention as one attention
                              instruction (0: PyTorch's decomposition)
  TORCHTPU_GELU_FROM_OUTPUT   gelu_backward from gelu's output where it can
                              (0: always recompute erf(x))
  TORCHTPU_LOG_SOFTMAX_PROBS  log_softmax keeps its probabilities for the
                              backward
  TORCHTPU_FUSED_LAYER_NORM   layer_norm as one instruction (0: IR primitives)
  TORCHTPU_OPTIM_FOREACH      torch.optim takes its foreach path on xla
  TORCHTPU_FUSED_ADAM         Adam/AdamW steps recorded straight on the engine

The C engine's own settings (TORCHTPU_TIER, TORCHTPU_FUSION, ...) are read
by src/base/config.c. reload() reads both again after the environment
changed; values the lowerings bound when they were imported
(GELU_FROM_OUTPUT, LOG_SOFTMAX_PROBS, FUSED_LAYER_NORM) and the optimizer
hooks installed at import keep their first values.
"""
import os


def _on(name):
    return os.environ.get(name, "1") != "0"


def _read():
    global FUSED_ATTENTION, GELU_FROM_OUTPUT, LOG_SOFTMAX_PROBS, FUSED_LAYER_NORM
    global OPTIM_FOREACH, FUSED_ADAM
    FUSED_ATTENTION = _on("TORCHTPU_FUSED_ATTENTION")
    GELU_FROM_OUTPUT = _on("TORCHTPU_GELU_FROM_OUTPUT")
    LOG_SOFTMAX_PROBS = _on("TORCHTPU_LOG_SOFTMAX_PROBS")
    FUSED_LAYER_NORM = _on("TORCHTPU_FUSED_LAYER_NORM")
    OPTIM_FOREACH = _on("TORCHTPU_OPTIM_FOREACH")
    FUSED_ADAM = _on("TORCHTPU_FUSED_ADAM")


_read()


def reload():
    """Reads the Python switches and the engine's settings again."""
    from torchtpu import _C
    _read()
    _C.config_reload()
