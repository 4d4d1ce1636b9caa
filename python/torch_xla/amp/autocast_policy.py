"""Which aten ops autocast changes on xla devices, and how.

The policy PyTorch/XLA applies under torch.autocast('xla') (the same op
set and the same three rules; the table is ours):

  LOWER  run in the autocast dtype (bfloat16 by default): matrix products,
         convolutions and the cheap ops PyTorch/XLA groups with them.
  FP32   run in float32: reductions, losses, normalisations and linear
         algebra whose accuracy suffers in 8 mantissa bits.
  PROMOTE run in the widest floating type among the tensor arguments
         (starting from the autocast dtype), so mixed inputs agree.

Keys are aten op names with their overload ("conv2d.padding"; no overload
means the default one). Ops not listed are not autocast: they run in the
type of their inputs.
"""

LOWER = "lower_precision_fp"
FP32 = "fp32"
PROMOTE = "promote"

POLICY = {}

for _name in ("conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d",
              "conv3d.padding", "bmm", "mm", "baddbmm", "addmm", "addbmm", "linear",
              "matmul", "conv_tbc", "conv_transpose1d", "conv_transpose2d.input",
              "conv_transpose3d.input", "prelu", "relu", "max_pool2d", "einsum"):
    POLICY[_name] = LOWER

for _name in ("batch_norm", "_softmax", "softmax.int", "softmax.Dimname", "log_softmax.int",
              "log_softmax.Dimname", "binary_cross_entropy", "pow.Tensor_Scalar", "prod",
              "prod.dim_int", "prod.dim_Dimname", "cdist", "trace", "cholesky",
              "cholesky_inverse", "cholesky_solve", "inverse", "reflection_pad1d",
              "reflection_pad2d", "replication_pad1d", "replication_pad2d",
              "replication_pad3d", "mse_loss", "cosine_embedding_loss", "nll_loss",
              "nll_loss2d", "hinge_embedding_loss", "smooth_l1_loss", "cross_entropy_loss",
              "l1_loss", "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss",
              "multi_margin_loss", "ctc_loss.IntList", "ctc_loss.Tensor", "kl_div",
              "multilabel_margin_loss", "binary_cross_entropy_with_logits", "qr", "svd",
              "triangular_solve", "multilabel_margin_loss_forward", "linalg_svd",
              "linalg_inv_ex"):
    POLICY[_name] = FP32

for _name in ("stack", "cat", "index_copy", "index_copy.dimname"):
    POLICY[_name] = PROMOTE

del _name
