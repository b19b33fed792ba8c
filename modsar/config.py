"""One typed configuration tree for a trial, validated at load.

Every key is addressable with a dotted name (``model.hidden_size``), the same name used in YAML design
spaces, CLI overrides and Parquet result columns. An unknown key, a wrong type or a value outside the
allowed choices is a one-line `ModsarError` that names the key and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from modsar.errors import ModsarError
from modsar.limits import SIZE_LIMITS

FLOAT32_MAX = 3.4028234663852886e38
MAX_THREADS = (
    1024  # train.threads: torch CPU threads (a trial may run on a larger machine than the one checking)
)


def choice(default: Any, *allowed: Any) -> Any:
    """A field whose value must be one of `allowed` (checked in `validate`)."""
    return field(default=default, metadata={"choices": allowed})


@dataclass
class DataConfig:
    max_len: int = 0  # history items the model sees; 0 = the dataset's registry default (50; 200 for ML-1M)
    batch_size: int = 128
    eval_batch_size: int = 256
    padding_free: bool = (
        True  # batches only as wide as their longest row; output layer only at real positions
    )
    batching: str = choice(
        "tokens", "tokens", "length", "random"
    )  # who shares a batch: see modsar.data.batches
    samples: str = choice(
        "sequences", "sequences", "prefixes"
    )  # a row: a user's window, or one prefix (RecBole)
    view: str = choice("user", "user", "item")  # item: each item's users in time order (modsar.data.views)
    split: str = choice("loo", "loo", "temporal")  # leave-one-out, or one global time cut (modsar.data.split)
    split_valid: float = 0.8  # temporal: the validation cut, a quantile of all timestamps
    split_test: float = 0.9  # temporal: the test cut, a quantile of all timestamps
    split_dates: str = ""  # temporal: "YYYY-MM-DD,YYYY-MM-DD" cuts instead of the quantiles (UTC)
    split_targets: str = choice(
        "first", "first", "every"
    )  # temporal: each user's first event after a cut, or all


@dataclass
class ModelConfig:
    backbone: str = (
        "modular"  # modular | duorec | bsarec | gru4rec | albert | llama | transfo_xl | hf:<model_type>
    )
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 1
    ffn_size: int = 0  # 0 = 4 * hidden_size
    activation: str = choice("gelu", "gelu", "relu")
    norm: str = choice("auto", "auto", "pre", "post", "sasrec", "normed_skip")  # auto: the backbone's own
    #   (modular: post); modular only: sasrec = SASRec's block, normed_skip = the ModSAR code's layernorm_first
    positional: str = choice(
        "auto", "auto", "learned", "sinusoidal", "none", "target_aligned", "rope", "relative"
    )  # modular: learned; target_aligned: relative keys by distance to the target
    pos_dim: int = 0  # learned/sinusoidal with pos_fusion concat|project: the position channel's width (< d);
    #                   target_aligned: each head's query dimensions that meet the distance codes (0 = all)
    pos_fusion: str = choice(
        "add", "add", "concat", "project"
    )  # absolute positions: added to the item vector,
    #                   concatenated beside it (items get d - pos_dim), or [item; position] projected to d
    dropout: float = 0.2  # embedding and hidden (residual branch) dropout
    attn_dropout: float = 0.2  # dropout on attention probabilities
    attn_output_dropout: bool = False  # `dropout` on the attention output before the sum (GPT, BERT and the
    #   residual paper's SASRec and DuoRec code; not the original SASRec code, which drops attention weights only)
    ffn_inner_dropout: bool = (
        True  # `dropout` between the FFN's two layers (SASRec, ModSAR code; BERT has none)
    )
    local_heads: int = 0  # LOCKER-style window heads (the last `local_heads` of `num_heads`)
    local_window: int = 2  # AE: |i - j| <= w ; AR: 0 <= i - j <= w
    user_fusion: str = choice(
        "none", "none", "concat", "token", "bias"
    )  # how the user enters (modular only):
    #   concat = SSE-PT's vector beside every item vector, token = a first token every position attends to,
    #   bias = a per-layer projection of the user vector added to every attention query
    time_bias: str = choice("none", "none", "gap", "session")  # modular, timestamped data: a learned per-head
    #   attention bias by the time between query and key (gap: log2 buckets of the seconds apart) or by the
    #   session boundaries between them (session: pauses longer than session_gap); see modsar.model.modular
    session_gap: float = 1800.0  # time_bias=session: seconds of inactivity that start a new session
    user_size: int = (
        0  # concat: the user vector's width; 0 = hidden_size // 2 (the item vector gets the rest)
    )
    embedding_norm: bool = False  # LayerNorm on item + position embedding before dropout (BERT4Rec)
    scale_embedding: bool = True  # multiply item vectors by sqrt(d) (SASRec); BERT4Rec adds them unscaled
    head: str = choice("dot", "dot", "bert4rec")  # dot: h . E ; bert4rec: LN(GELU(W h + b)) . E + item bias
    init: str = choice(
        "sasrec_plus",
        "sasrec_plus",
        "normal",
        "truncated_normal",
        "xavier",
        "xavier_uniform",
        "xavier_attention",
    )  # see ModularSAR.__init__
    norm_eps: float = (
        1e-5  # modular: the blocks' LayerNorm epsilon (BERT's code: 1e-12; its embedding and output
    )
    #                         head LayerNorms use 1e-12 always)
    positions_from: str = choice("end", "end", "start")  # position 0 = the most recent item, or the first one
    item_sse_prob: float = 0.0  # SSE: probability p of replacing training-input items (see sse_style)
    sse_style: str = choice("token", "token", "paper")  # token: each item w.p. p; paper: a row w.p. p, then
    #                                                      each of its items w.p. 1 - p (rate p(1 - p))
    user_sse_prob: float = 0.0  # SSE: replace the training user id with a random user with this prob.
    gru_size: int = 0  # gru4rec: the GRU's state size; 0 = hidden_size
    bsa_cutoff: int = (
        3  # bsarec: c, the low-pass keeps the lowest c // 2 + 1 frequencies of the max_len window
    )
    bsa_alpha: float = 0.9  # bsarec (official default; 0.7 on Beauty/Toys): layer = alpha * frequency branch + (1 - alpha) * attention branch


@dataclass
class LossConfig:
    name: str = choice("ce", "ce", "sampled_ce", "bce", "bpr", "gbce")
    num_negatives: int = 1  # sampled_ce: negatives shared by a batch; bce/bpr/gbce: negatives per position
    gbce_t: float = 0.75  # gbce: calibration t in [0, 1] (0 = plain BCE), as gSASRec
    cl_weight: float = 0.1  # duorec: lambda, the contrastive term's weight (0 = SASRec's loss alone)
    cl_temperature: float = 1.0  # duorec: tau of the InfoNCE
    cl_views: str = choice(
        "us_x", "us_x", "un", "su", "us"
    )  # duorec: which views are contrasted (see duorec.py)
    cl_similarity: str = choice("dot", "dot", "cos")  # duorec: similarity of two sequence representations
    normalize: str = choice(
        "batch", "batch", "epoch"
    )  # mean over the batch's positions, or over an average batch
    fused: bool = (
        True  # ce: chunked output layer + softmax with its gradient (false: the plain logits, to compare)
    )


@dataclass
class TrainConfig:
    optimizer: str = choice("adam", "adam", "adamw", "adamw_bert")  # adamw_bert: BERT's (no bias correction)
    lr: float = 1e-3
    weight_decay: float = 0.0
    weight_decay_exclude: str = choice(
        "norm,bias", "norm,bias", "none", "norm,bias,embedding"
    )  # kept from decay
    beta2: float = 0.999  # Adam's second-moment decay (SASRec's code: 0.98)
    grad_clip: float = 0.0  # max global grad norm; 0 = off
    warmup_steps: int = 0  # optimizer steps of linear warm-up from lr / warmup_steps to lr (BERT); 0 = none
    lr_schedule: str = choice("constant", "constant", "linear")  # linear: decay to 0 at max_epochs (BERT's)
    max_epochs: int = 200
    eval_every: int = 1  # epochs between validation passes
    patience: int = 10  # validation passes without improvement before stopping; 0 = never stop early
    min_steps: int = (
        0  # optimizer steps before patience may stop a run (a plateau is not a verdict); 0 = none
    )
    monitor: str = "ndcg@10"  # validation metric for early stopping and model selection
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int = 0  # torch CPU threads; 0 = leave torch's default
    precision: str = choice("fp32", "fp32", "bf16")  # bf16: the item-scoring products of the CE in bfloat16

    @property
    def monitor_key(self) -> str:
        """The evaluation dict's key for `monitor` (HR@k is reported as recall@k)."""
        return self.monitor.replace("hr@", "recall@")


@dataclass
class EvalConfig:
    ks: list[int] = field(default_factory=lambda: [1, 5, 10, 20, 50])
    filter_seen: str = choice("none", "none", "history")  # remove the user's earlier items from the ranking
    sampled_negatives: int = 0  # 0 = exact full ranking over all items; N = rank against N fixed negatives
    sample_seed: int = 12345
    generate_steps: int = 0  # > 0: greedy rollouts of this many steps from every test user's history after
    #                          testing (modsar.evaluation.rollouts); their metrics become the row's generate.* columns


@dataclass
class Config:
    dataset: str = "synthetic"
    task: str = choice("ar", "ar", "ae")  # the AE/AR switch: attention direction AND objective
    mask_prob: float = 0.2  # AE cloze masking probability (ignored by AR)
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def stored(self) -> dict[str, Any]:
        """What rows and checkpoints record: the modular backbone's `auto` norm is written as what it is, post,
        because before 0.2 it meant pre; rows and checkpoints of the two never pass for one another."""
        tree = self.to_dict()
        if self.model.backbone == "modular" and self.model.norm == "auto":
            tree["model"]["norm"] = "post"
        return tree

    @classmethod
    def from_stored(cls, tree: dict[str, Any], where: str = "config") -> Config:
        """The inverse of `stored`: a modular `auto` norm can only come from before 0.2, when it meant pre."""
        model = tree.get("model", {})
        if model.get("backbone", "modular") == "modular" and model.get("norm") == "auto":
            tree = {**tree, "model": {**model, "norm": "pre"}}
        return cls.from_dict(tree, where)

    def flat(self) -> dict[str, Any]:
        """Dotted-name view (``model.hidden_size``) of the stored form: the names used in YAML, CLI and Parquet."""
        return flatten(self.stored())

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "config") -> Config:
        """A full tree as `to_dict`/`stored` write it (checkpoints, search.json), older trees included."""
        flat = flatten(values)
        if "model.user_embedding" in flat:  # before 0.3: SSE-PT's switch, now user_fusion=concat
            flat["model.user_fusion"] = "concat" if flat.pop("model.user_embedding") else "none"
        cfg = cls()
        apply_overrides(cfg, flat, where, stored=True)
        return cfg


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def _fields(obj: Any) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(obj)}


def all_keys(cfg: Config | None = None) -> list[str]:
    return sorted((cfg or Config()).flat())


def _coerce(value: Any, annotation: str, key: str, where: str) -> Any:
    """Check `value` against a field's type; ints are accepted where floats are expected."""
    expected = {"int": int, "float": float, "bool": bool, "str": str, "list[int]": list}[annotation]
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if expected is float and isinstance(value, str):  # YAML 1.1 reads "3e-4" (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if expected is list:
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise ModsarError(f"{where}: '{key}' must be a list of integers, got {value!r}")
        return list(value)
    if expected is int and isinstance(value, bool):
        raise ModsarError(f"{where}: '{key}' must be an integer, got {value!r}")
    import datetime

    if expected is str and isinstance(value, datetime.date):  # YAML reads 2000-11-20 as a date: the text
        return value.isoformat()  # was meant, and validate says what is wrong with it (split_dates needs two)
    if key == "data.split_dates" and isinstance(value, list):  # [A, B] (YAML's list) means "A,B": validate
        if not value:  # then says what is wrong with its dates, as for the text
            raise ModsarError(
                f"{where}: '{key}' needs two ISO dates, the validation cut then the test cut, and has "
                'none (e.g. "2000-11-20,2000-12-01"); got []'
            )
        return ",".join(v.isoformat() if isinstance(v, datetime.date) else str(v) for v in value)
    if not isinstance(value, expected):
        raise ModsarError(f"{where}: '{key}' must be {expected.__name__}, got {value!r}")
    return value


RENAMED = {"model.user_embedding": "model.user_fusion (true = concat, false = none)"}


def set_value(cfg: Config, key: str, value: Any, where: str = "config") -> None:
    """Set one dotted key, validating the name, the type and the allowed choices."""
    if not isinstance(key, str):  # YAML reads `1:` or `null:` as a non-string key
        raise ModsarError(
            f"{where}: key {key!r} is not a config name; use dotted names like model.hidden_size"
        )
    if key in RENAMED:
        raise ModsarError(f"{where}: '{key}' is now {RENAMED[key]}")
    parts = key.split(".")
    node: Any = cfg
    for depth, part in enumerate(parts):
        fields = _fields(node)
        if part not in fields:
            scope = ".".join(parts[:depth]) or "the top level"
            known = ", ".join(sorted(fields))
            raise ModsarError(f"{where}: unknown key '{key}' ('{part}' is not in {scope}; allowed: {known})")
        f = fields[part]
        if depth < len(parts) - 1:
            node = getattr(node, part)
            if not dataclasses.is_dataclass(node):
                raise ModsarError(f"{where}: '{'.'.join(parts[: depth + 1])}' is a value, not a section")
            continue
        if dataclasses.is_dataclass(getattr(node, part)):
            raise ModsarError(f"{where}: '{key}' is a section; set one of its keys, e.g. '{key}.<name>'")
        value = _coerce(value, str(f.type), key, where)  # annotations are strings (postponed evaluation)
        allowed = f.metadata.get("choices")
        if allowed and value not in allowed:
            raise ModsarError(
                f"{where}: '{key}' must be one of {', '.join(map(str, allowed))}; got {value!r}"
            )
        setattr(node, part, value)


def apply_overrides(
    cfg: Config, values: dict[str, Any], where: str = "config", stored: bool = False
) -> Config:
    for key, value in values.items():
        set_value(cfg, key, value, where)
    validate(cfg, where, stored)
    return cfg


def parse_override(text: str) -> tuple[str, Any]:
    """``model.hidden_size=64`` -> ("model.hidden_size", 64); the value is read as a YAML scalar/list."""
    if "=" not in text:
        raise ModsarError(f"override '{text}' is not of the form key=value (e.g. model.hidden_size=64)")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults <- YAML file (nested or dotted keys) <- ``key=value`` overrides."""
    cfg = Config()
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ModsarError(f"config file '{path}' does not exist")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except UnicodeDecodeError:
            raise ModsarError(f"config file '{path}' is not a text (UTF-8) file") from None
        except yaml.YAMLError as exc:
            line = getattr(getattr(exc, "problem_mark", None), "line", None)
            at = f" at line {line + 1}" if line is not None else ""
            raise ModsarError(f"config file '{path}' is not valid YAML{at}") from None
        if not isinstance(data, dict):
            raise ModsarError(f"config file '{path}' must hold a mapping of keys to values")
        apply_overrides(cfg, flatten(data), str(path))
    for text in overrides or []:
        key, value = parse_override(text)
        set_value(cfg, key, value, "override")
    validate(cfg, "config")
    return cfg


# The backbone registry's checks (modsar.model.registry.check_config), added when it is imported, which the
# package does on import (modsar/__init__.py): the registry sits above the config it checks, never below it.
BACKBONE_CHECKS: list[Callable[[Config, Callable[[str], NoReturn], bool], None]] = []


def validate(cfg: Config, where: str = "config", stored: bool = False) -> None:
    """Cross-field checks a single field's type cannot express. `stored`: a record an earlier run wrote (a
    checkpoint, a search's base), which keeps another backbone's settings: they were no-ops there, and refusing
    them would make old results unreadable; what a user asks for now is refused instead."""
    m = cfg.model

    def bad(msg: str) -> NoReturn:
        raise ModsarError(f"{where}: {msg}")

    if cfg.train.precision == "bf16" and (cfg.loss.name != "ce" or not cfg.loss.fused):
        bad(
            "train.precision=bf16 runs the fused full-softmax CE's products in bfloat16, and this run has none "
            f"(loss.name={cfg.loss.name}, loss.fused={str(cfg.loss.fused).lower()}); use train.precision=fp32"
        )
    for key, value in cfg.flat().items():
        if isinstance(value, float) and not (math.isfinite(value) and abs(value) <= FLOAT32_MAX):
            bad(f"'{key}' must be a finite number of float32 range; got {value}")  # YAML reads .nan, .inf
        for number in value if isinstance(value, list) else [value]:  # Parquet columns are int64
            if isinstance(number, int) and not -(2**63) <= number < 2**63:
                bad(f"'{key}' must fit in 64 bits; got {number}")
        limit = SIZE_LIMITS.get(key)
        if limit is not None and value > limit:
            bad(f"'{key}' must be <= {limit:,} (no model of that size fits in memory); got {value:,}")
    for key, value in (("seed", cfg.seed), ("eval.sample_seed", cfg.eval.sample_seed)):
        if not 0 <= value < 2**32:  # numpy and torch seeds are unsigned 32-bit
            bad(f"'{key}' must be between 0 and 2**32 - 1; got {value}")
    for key, value in [
        ("model.hidden_size", m.hidden_size),
        ("model.num_layers", m.num_layers),
        ("model.num_heads", m.num_heads),
        ("data.batch_size", cfg.data.batch_size),
        ("data.eval_batch_size", cfg.data.eval_batch_size),
        ("train.max_epochs", cfg.train.max_epochs),
        ("train.eval_every", cfg.train.eval_every),
    ]:
        if value < 1:
            bad(f"'{key}' must be >= 1; got {value}")
    if m.hidden_size % m.num_heads:
        bad(f"'model.hidden_size' ({m.hidden_size}) must be divisible by 'model.num_heads' ({m.num_heads})")
    for check in BACKBONE_CHECKS:  # the backbone exists, has the task and accepts these settings
        check(cfg, bad, stored)
    if not 0 <= m.local_heads <= m.num_heads:
        bad(f"'model.local_heads' must be between 0 and model.num_heads ({m.num_heads}); got {m.local_heads}")
    if m.local_window < 0:
        bad(f"'model.local_window' must be >= 0; got {m.local_window}")
    for key in ("dropout", "attn_dropout", "item_sse_prob", "user_sse_prob"):
        if not 0.0 <= getattr(m, key) < 1.0:
            bad(f"'model.{key}' must be in [0, 1); got {getattr(m, key)}")
    if m.user_sse_prob and m.user_fusion == "none":
        bad("'model.user_sse_prob' needs a user in the model ('model.user_fusion' concat, token or bias)")
    if m.user_fusion == "concat":
        user = m.user_size or m.hidden_size // 2
        if not 0 < user < m.hidden_size:
            bad(f"'model.user_size' must be between 1 and hidden_size - 1; got {user}")
    elif m.user_size:
        bad(
            f"'model.user_size' is the width of user_fusion=concat's vector; user_fusion={m.user_fusion} uses the "
            "hidden size; leave it at 0"
        )
    if not 0.0 < cfg.mask_prob < 1.0:
        bad(f"'mask_prob' must be in (0, 1); got {cfg.mask_prob}")
    if cfg.loss.num_negatives < 1:
        bad(f"'loss.num_negatives' must be >= 1; got {cfg.loss.num_negatives}")
    if not 0.0 <= cfg.loss.gbce_t <= 1.0:
        bad(f"'loss.gbce_t' must be in [0, 1] (0 = plain BCE, 1 = fully calibrated); got {cfg.loss.gbce_t}")
    if cfg.loss.cl_temperature <= 0:
        bad(f"'loss.cl_temperature' must be > 0; got {cfg.loss.cl_temperature}")
    if not 0.0 < cfg.data.split_valid < cfg.data.split_test < 1.0:
        bad(
            f"'data.split_valid' and 'data.split_test' must be quantiles with 0 < valid < test < 1; got "
            f"{cfg.data.split_valid} and {cfg.data.split_test}"
        )
    if cfg.data.split_dates:
        from modsar.data.split import parse_dates

        try:
            parse_dates(cfg.data.split_dates)
        except ValueError as exc:  # which rule: two dates, each ISO, in order
            bad(f"'data.split_dates' {exc} (e.g. \"2000-11-20,2000-12-01\"); got {cfg.data.split_dates!r}")
    from modsar.devices import name_problem  # torch-free: whether a GPU is present is asked when a run starts

    if not stored and (device := name_problem(cfg.train.device)):  # stored: the machine that ran it took it
        bad(device)
    if m.session_gap <= 0:
        bad(f"'model.session_gap' must be > 0 seconds; got {m.session_gap}")
    if cfg.data.samples == "prefixes" and cfg.task != "ar":
        bad(
            "'data.samples=prefixes' labels each training prefix's next item, a causal objective; task=ae masks "
            "whole windows: use data.samples=sequences, or task=ar"
        )
    if cfg.data.max_len < 0:
        bad(f"'data.max_len' must be >= 1, or 0 for the dataset default; got {cfg.data.max_len}")
    if not cfg.eval.ks or min(cfg.eval.ks) < 1:
        bad(f"'eval.ks' must be a non-empty list of positive integers; got {cfg.eval.ks}")
    if cfg.train.lr <= 0:
        bad(f"'train.lr' must be > 0; got {cfg.train.lr}")
    if not 0.0 <= cfg.train.beta2 < 1.0:  # torch's Adam refuses it only once the data and model are built
        bad(
            f"'train.beta2' (Adam's second-moment decay) must be in [0, 1), e.g. 0.999 or SASRec's 0.98; got "
            f"{cfg.train.beta2}"
        )
    if not m.norm_eps >= 1e-30:  # float32 holds it (1e-45 would be 0 there)
        bad(
            f"'model.norm_eps' must be > 0 (LayerNorm's epsilon, e.g. 1e-5 or BERT's 1e-12); got {m.norm_eps}"
        )
    for key, value, what in [
        ("train.patience", cfg.train.patience, "0 = never stop early"),
        ("train.warmup_steps", cfg.train.warmup_steps, "0 = no warm-up"),
        ("train.min_steps", cfg.train.min_steps, "0 = patience may stop at any step"),
        ("train.weight_decay", cfg.train.weight_decay, "0 = none"),
        ("train.grad_clip", cfg.train.grad_clip, "0 = off"),
        ("train.threads", cfg.train.threads, "0 = torch's default"),
        ("model.ffn_size", m.ffn_size, "0 = 4 * hidden_size"),
        ("model.user_size", m.user_size, "0 = hidden_size // 2"),
        ("model.pos_dim", m.pos_dim, "0 = the hidden size, added"),
        ("eval.generate_steps", cfg.eval.generate_steps, "0 = no rollouts"),
        ("model.gru_size", m.gru_size, "0 = hidden_size"),
        ("loss.cl_weight", cfg.loss.cl_weight, "0 = no contrastive term"),
    ]:
        if value < 0:
            bad(f"'{key}' must be >= 0 ({what}); got {value}")
    if cfg.train.threads > MAX_THREADS:  # torch fails to start that many (an ImportError deep in its import)
        bad(
            f"'train.threads' must be <= {MAX_THREADS} (more than any machine's cores; 0 = torch's default); got "
            f"{cfg.train.threads}"
        )
    metric_names = {f"{name}@{k}" for name in ("recall", "ndcg", "mrr", "hr") for k in cfg.eval.ks}
    if cfg.train.monitor not in metric_names:
        bad(f"'train.monitor' must be a metric at one of eval.ks, e.g. ndcg@10; got {cfg.train.monitor!r}")
    if cfg.eval.sampled_negatives < 0:
        bad(f"'eval.sampled_negatives' must be >= 0; got {cfg.eval.sampled_negatives}")
