"""Sizes no run may exceed (beyond them no model or batch fits in memory), read by the config's checks and by
data preparation alike: a module of its own on the ground floor, which imports nothing."""

SIZE_LIMITS = {
    "model.hidden_size": 2**16,
    "model.ffn_size": 2**18,
    "model.user_size": 2**16,
    "model.num_layers": 2**10,
    "model.num_heads": 2**10,
    "data.max_len": 2**20,
    "data.batch_size": 2**24,
    "data.eval_batch_size": 2**24,
}
