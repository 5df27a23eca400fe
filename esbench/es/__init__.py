"""ES machinery shared by the `es` recipe, its replicas and the analyses (torch-free at this level)."""

# Precision modes that compute in bf16 as public code does (esbench.es.weights); reports group them as "bf16 ES".
BF16_MODES = ("paper-bf16", "paper-bf16-per-member")
