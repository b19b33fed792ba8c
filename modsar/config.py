"""One typed configuration tree for a trial, validated at load.

Every key is addressable with a dotted name (``model.hidden_size``), the same name used in YAML design spaces,
CLI overrides and Parquet result columns. An unknown key, a wrong type or a value outside the allowed choices
is a one-line `ModsarError` that names the key and what is allowed. What one setting may hold (its choices,
its range) is declared on its field; `validate` checks those ranges, then the rules that relate settings to
one another."""

from __future__ import annotations

import copy
import dataclasses
import enum
import math
import numbers
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import yaml

from modsar.errors import ModsarError
from modsar.limits import SIZE_LIMITS
from modsar.task import Task

FLOAT32_MAX = 3.4028234663852886e38
# float32's smallest normal number: the model computes in float32, where a smaller nonzero value is subnormal
# (imprecise, flushed to 0 on many devices) or 0
FLOAT32_TINY = 2.0**-126
# train.threads: torch CPU threads (a trial may run on a larger machine than the one checking)
MAX_THREADS = 1024

# Backbones' own settings: backbone name -> the dataclass of its section, whose fields are the keys
# model.<backbone>.<field> (a registry entry's `section`; modsar.model.registry.register fills this). A
# config writes (rows, checkpoints, search plans) the section of its own backbone only.
SECTIONS: dict[str, type] = {}
# run when a key names a model section not declared yet, before it is refused: the registry loads the
# plugins there (a plugin's section exists once its module has run)
SECTION_LOADERS: list[Callable[[], None]] = []


def choice(default: Any, *allowed: Any) -> Any:
    """A field whose value must be one of `allowed` (checked in `set_value`). An enum field (`task`) lists
    its members: a name given as text is read into its member there."""
    return field(default=default, metadata={"choices": allowed})


@dataclass(frozen=True)
class Bounds:
    """The range a number field (or every item of a list field, which must not be empty) must lie in, and
    how its error says so: ``'<key>' <requirement>; got <value>``. The requirement is derived from the ends
    ("must be >= 1", "must be in [0, 1)"), with `why` in parentheses after it, unless `says` words it."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False  # the low end itself is refused: > low
    open_high: bool = False  # the high end itself is refused: < high
    why: str = ""  # what the range (or its low end, when `high_why` is set) means
    high_why: str = ""  # set: a value above `high` has its own message, with this reason
    says: str = ""  # the whole requirement, where the derived wording would not say what the value means
    # checked before every rule, which may compute with it (hidden_size // num_heads); the others after the
    # backbone's checks, which refuse a setting the backbone does not read before its range is judged
    first: bool = False

    def admits(self, value: Any) -> bool:
        """Whether `value` (a number, or a list of them) lies within both ends."""
        if isinstance(value, list):
            return bool(value) and all(self.admits(item) for item in value)
        return self._above_low(value) and self._below_high(value)

    def _above_low(self, value: float) -> bool:
        if self.low is None:
            return True
        return value > self.low if self.open_low else value >= self.low

    def _below_high(self, value: float) -> bool:
        if self.high is None:
            return True
        return value < self.high if self.open_high else value <= self.high

    def problem(self, value: Any) -> str | None:
        """What `value` fails to be ("must be >= 0 (0 = off)"), or None when it is within the bounds."""
        if self.high_why and not isinstance(value, list) and not self._below_high(value):
            return f"must be {'<' if self.open_high else '<='} {self.high} ({self.high_why})"
        if self.admits(value):
            return None
        return self.says or self._requirement()

    def _requirement(self) -> str:
        why = f" ({self.why})" if self.why else ""
        if self.low is not None and self.high is not None and not self.high_why:
            left, right = "(" if self.open_low else "[", ")" if self.open_high else "]"
            return f"must be in {left}{self.low}, {self.high}{right}{why}"
        if self.low is not None:
            return f"must be {'>' if self.open_low else '>='} {self.low}{why}"
        return f"must be {'<' if self.open_high else '<='} {self.high}{why}"


def bounded(
    default: Any = dataclasses.MISSING, *, factory: Callable[[], Any] | None = None, **bounds: Any
) -> Any:
    """A number field (or list of numbers, made by `factory`) with the range `bounds` (`Bounds`'s fields)
    declared on it, which `validate` checks."""
    metadata = {"bounds": Bounds(**bounds)}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


SIZE: dict[str, Any] = {"low": 1, "first": True}  # a width, count or batch size the other checks compute with
RATE: dict[str, Any] = {"low": 0, "high": 1, "open_high": True}  # a probability or dropout rate: [0, 1)
# numpy's and torch's seeds are unsigned 32-bit
SEED: dict[str, Any] = {"low": 0, "high": 2**32, "open_high": True, "first": True}
SEED["says"] = "must be between 0 and 2**32 - 1"


@dataclass
class DataConfig:
    # history items the model sees; 0 = the dataset's registry default (50; 200 for ML-1M)
    max_len: int = bounded(0, low=0, says="must be >= 1, or 0 for the dataset default")
    batch_size: int = bounded(128, **SIZE)  # training rows per batch (data.batching=tokens: on average)
    eval_batch_size: int = bounded(256, **SIZE)  # users per evaluation batch (memory only, not results)
    # batches only as wide as their longest row; output layer only at real positions
    padding_free: bool = True
    # who shares a batch: see modsar.data.batches
    batching: str = choice("tokens", "tokens", "length", "random")
    # a row: a user's window, or one prefix (RecBole)
    samples: str = choice("sequences", "sequences", "prefixes")
    view: str = choice("user", "user", "item")  # item: each item's users in time order (modsar.data.views)
    split: str = choice("loo", "loo", "temporal")  # leave-one-out, or one global time cut (modsar.data.split)
    split_valid: float = 0.8  # temporal: the validation cut, a quantile of all timestamps
    split_test: float = 0.9  # temporal: the test cut, a quantile of all timestamps
    split_dates: str = ""  # temporal: "YYYY-MM-DD,YYYY-MM-DD" cuts instead of the quantiles (UTC)
    # temporal: each user's first event after a cut, or all
    split_targets: str = choice("first", "first", "every")


@dataclass
class ModelConfig:
    # a registered backbone (modsar.model.registry.names(); modsar.model.backbones declares the core's)
    backbone: str = "modular"
    hidden_size: int = bounded(64, **SIZE)  # d: the width of item vectors and of every layer
    num_layers: int = bounded(2, **SIZE)  # transformer (or GRU) layers
    num_heads: int = bounded(1, **SIZE)  # attention heads per layer; hidden_size must divide by it
    ffn_size: int = bounded(0, low=0, why="0 = 4 * hidden_size")  # the feed-forward layer's inner width
    activation: str = choice("gelu", "gelu", "relu")  # the feed-forward layer's nonlinearity
    # auto: the backbone's own (modular: post); modular only: sasrec = SASRec's block, normed_skip = the
    # ModSAR code's layernorm_first
    norm: str = choice("auto", "auto", "pre", "post", "sasrec", "normed_skip")
    positional: str = choice(
        "auto", "auto", "learned", "sinusoidal", "none", "target_aligned", "rope", "relative"
    )  # modular: learned; target_aligned: relative keys by distance to the target
    # learned/sinusoidal with pos_fusion concat|project: the position channel's width (< d); target_aligned:
    # each head's query dimensions that meet the distance codes (0 = all)
    pos_dim: int = bounded(0, low=0, why="0 = the hidden size, added")
    # absolute positions: added to the item vector, concatenated beside it (items get d - pos_dim), or
    # [item; position] projected to d
    pos_fusion: str = choice("add", "add", "concat", "project")
    dropout: float = bounded(0.2, **RATE)  # embedding and hidden (residual branch) dropout
    attn_dropout: float = bounded(0.2, **RATE)  # dropout on attention probabilities
    # `dropout` on the attention output before the sum (GPT, BERT and the residual paper's SASRec and DuoRec
    # code; not the original SASRec code, which drops attention weights only)
    attn_output_dropout: bool = False
    # `dropout` between the FFN's two layers (SASRec, ModSAR code; BERT has none)
    ffn_inner_dropout: bool = True
    local_heads: int = 0  # LOCKER-style window heads (the last `local_heads` of `num_heads`)
    local_window: int = bounded(2, low=0)  # AE: |i - j| <= w ; AR: 0 <= i - j <= w
    # how the user enters (modular only):
    user_fusion: str = choice("none", "none", "concat", "token", "bias")
    #   concat = SSE-PT's vector beside every item vector, token = a first token every position attends to,
    #   bias = a per-layer projection of the user vector added to every attention query
    time_bias: str = choice("none", "none", "gap", "session")  # modular, timestamped data: a learned per-head
    #   attention bias by the time between query and key (gap: log2 buckets of the seconds apart) or by the
    #   session boundaries between them (session: pauses longer than session_gap); see modsar.model.modular
    # time_bias=session: seconds of inactivity that start a new session
    session_gap: float = bounded(1800.0, low=0, open_low=True, says="must be > 0 seconds")
    # concat: the user vector's width; 0 = hidden_size // 2 (the item vector gets the rest)
    user_size: int = bounded(0, low=0, why="0 = hidden_size // 2")
    embedding_norm: bool = False  # LayerNorm on item + position embedding before dropout (BERT4Rec)
    scale_embedding: bool = True  # multiply item vectors by sqrt(d) (SASRec); BERT4Rec adds them unscaled
    head: str = choice("dot", "dot", "bert4rec")  # dot: h . E ; bert4rec: LN(GELU(W h + b)) . E + item bias
    # the weights' start: sasrec_plus (SASRec+), normal N(0, 0.02) (GPT-2), truncated_normal (BERT's code),
    # xavier (SASRec's PyTorch code), xavier_uniform (the ModSAR code), xavier_attention (q, k, v only)
    init: str = choice(
        "sasrec_plus",
        "sasrec_plus",
        "normal",
        "truncated_normal",
        "xavier",
        "xavier_uniform",
        "xavier_attention",
    )
    # modular: the blocks' LayerNorm epsilon (BERT's code: 1e-12; its embedding and output head LayerNorms use
    # 1e-12 always); at least 1e-30, which float32 holds (1e-45 would be 0 there)
    norm_eps: float = bounded(
        1e-5, low=1e-30, says="must be > 0 (LayerNorm's epsilon, e.g. 1e-5 or BERT's 1e-12)"
    )
    positions_from: str = choice("end", "end", "start")  # position 0 = the most recent item, or the first one
    # SSE: probability p of replacing training-input items (see sse_style)
    item_sse_prob: float = bounded(0.0, **RATE)
    sse_style: str = choice("token", "token", "paper")  # token: each item w.p. p; paper: a row w.p. p, then
    #                                                      each of its items w.p. 1 - p (rate p(1 - p))
    # SSE: replace the training user id with a random user with this prob.
    user_sse_prob: float = bounded(0.0, **RATE)
    gru_size: int = bounded(0, low=0, why="0 = hidden_size")  # gru4rec: the GRU's state size
    # bsarec: c, the low-pass keeps the lowest c // 2 + 1 frequencies of the max_len window
    bsa_cutoff: int = bounded(3, low=0, why="the low-pass keeps the lowest c // 2 + 1 bins")
    # bsarec (official default; 0.7 on Beauty/Toys): layer = alpha * frequency branch + (1 - alpha) *
    # attention branch
    bsa_alpha: float = bounded(0.9, low=0, high=1, why="the frequency branch's weight")

    @property
    def ffn_width(self) -> int:
        """The feed-forward layer's inner width: ffn_size, or 4 x hidden_size where it is 0 (every backbone,
        the HuggingFace ones' config fields included)."""
        return self.ffn_size or 4 * self.hidden_size

    @property
    def user_width(self) -> int:
        """The user vector's width beside the item vector under user_fusion=concat (SSE-PT), else 0:
        user_size, or hidden_size // 2 where it is 0."""
        return (self.user_size or self.hidden_size // 2) if self.user_fusion == "concat" else 0

    @property
    def head_size(self) -> int:
        """Each attention head's width, hidden_size // num_heads (hidden_size divides by num_heads)."""
        return self.hidden_size // self.num_heads

    @property
    def norm_style(self) -> str:
        """Where the blocks' LayerNorms sit: `norm`, with auto read as the modular backbone's own, post-norm
        (BSARec's too; a HuggingFace model's auto is its architecture's own, hf_plugins.spec)."""
        return "post" if self.norm == "auto" else self.norm

    @property
    def position_code(self) -> str:
        """How positions are coded: `positional`, with auto read as the modular backbone's own, a learned
        table (BSARec's too; a HuggingFace model's auto is its architecture's own, hf_plugins.spec)."""
        return "learned" if self.positional == "auto" else self.positional

    @property
    def absolute_positions(self) -> bool:
        """Whether the modular backbone codes absolute positions (learned or sinusoidal), so that pos_fusion,
        pos_dim and positions_from mean something."""
        return self.position_code in ("learned", "sinusoidal")

    @property
    def item_width(self) -> int:
        """The item vectors' width: hidden_size, less concat's user vector and a concatenated position
        channel (the modular backbone; the others refuse those settings and keep hidden_size)."""
        position = self.pos_dim if self.absolute_positions and self.pos_fusion == "concat" else 0
        return self.hidden_size - self.user_width - position

    @property
    def timed(self) -> bool:
        """Whether attention is biased by time (model.time_bias other than none): the model then reads the
        inputs' timestamps, so batches, evaluation and the data's checks must carry them."""
        return self.time_bias != "none"

    if not TYPE_CHECKING:  # to mypy a misspelt attribute stays an error, not an Any

        def __getattr__(self, name: str) -> Any:
            """`cfg.model.<backbone>`: that backbone's own settings section (`SECTIONS`), its defaults until
            a key of it is set."""
            if name.startswith("_") or name not in SECTIONS:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            sections = self.__dict__.setdefault("_sections", {})
            if name not in sections:
                sections[name] = SECTIONS[name]()
            return sections[name]

        def __setattr__(self, name: str, value: Any) -> None:
            """`cfg.model.<backbone> = <its section>` keeps it where the checks and records read sections."""
            if name in SECTIONS:
                if not isinstance(value, SECTIONS[name]):
                    raise ModsarError(
                        f"'model.{name}' is a section; set one of its keys, or assign a "
                        f"{SECTIONS[name].__name__}"
                    )
                self.__dict__.setdefault("_sections", {})[name] = value
            else:
                super().__setattr__(name, value)

    def section(self, name: str) -> Any:
        """Backbone `name`'s own settings section, as `cfg.model.<name>` gives it (typed code's way)."""
        return getattr(self, name)

    def __copy__(self) -> ModelConfig:
        """A copy whose sections are copies too (a shared one would change with the original)."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        if "_sections" in new.__dict__:
            new.__dict__["_sections"] = {k: copy.copy(v) for k, v in self.__dict__["_sections"].items()}
        return new

    def changed_sections(self) -> dict[str, dict[str, Any]]:
        """The settings sections holding a value other than their defaults: {backbone: {field: value}}."""
        changed = {}
        for name, section in self.__dict__.get("_sections", {}).items():
            values, default = dataclasses.asdict(section), dataclasses.asdict(type(section)())
            if values != default:
                changed[name] = {key: value for key, value in values.items() if value != default[key]}
        return changed

    def __eq__(self, other: object) -> bool:
        """Equal fields and equal settings sections (a section at its defaults equals none)."""
        if type(other) is not type(self):
            return NotImplemented
        fields = [f.name for f in dataclasses.fields(self)]
        return [getattr(self, n) for n in fields] == [getattr(other, n) for n in fields] and (
            self.changed_sections() == other.changed_sections()  # type: ignore[attr-defined]
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as the generated __eq__ leaves it


@dataclass
class LossConfig:
    # ce: softmax over all items; sampled_ce: over the target and shared negatives; bce / bpr / gbce: the
    # target against per-position negatives (gbce: gSASRec's calibrated BCE)
    name: str = choice("ce", "ce", "sampled_ce", "bce", "bpr", "gbce")
    # sampled_ce: negatives shared by a batch; bce/bpr/gbce: negatives per position
    num_negatives: int = bounded(1, low=1)
    # gbce: calibration t in [0, 1] (0 = plain BCE), as gSASRec
    gbce_t: float = bounded(0.75, low=0, high=1, why="0 = plain BCE, 1 = fully calibrated")
    # duorec: lambda, the contrastive term's weight (0 = SASRec's loss alone)
    cl_weight: float = bounded(0.1, low=0, why="0 = no contrastive term")
    cl_temperature: float = bounded(1.0, low=0, open_low=True)  # duorec: tau of the InfoNCE
    # duorec: which views are contrasted (see duorec.py)
    cl_views: str = choice("us_x", "us_x", "un", "su", "us")
    cl_similarity: str = choice("dot", "dot", "cos")  # duorec: similarity of two sequence representations
    # mean over the batch's positions, or over an average batch
    normalize: str = choice("batch", "batch", "epoch")
    # ce: chunked output layer + softmax with its gradient (false: the plain logits, to compare)
    fused: bool = True


@dataclass
class TrainConfig:
    optimizer: str = choice("adam", "adam", "adamw", "adamw_bert")  # adamw_bert: BERT's (no bias correction)
    # the optimizer's learning rate (peak, under a schedule)
    lr: float = bounded(
        1e-3,
        low=FLOAT32_TINY,
        says="must be a positive normal float32, >= 2**-126 (about 1.18e-38): the model trains in float32, "
        "where a smaller rate is 0 or subnormal",
    )
    weight_decay: float = bounded(0.0, low=0, why="0 = none")  # decoupled for adamw, L2 for adam
    # parameters kept from weight decay
    weight_decay_exclude: str = choice("norm,bias", "norm,bias", "none", "norm,bias,embedding")
    # Adam's second-moment decay (SASRec's code: 0.98); torch's Adam refuses one outside [0, 1) only once the
    # data and model are built
    beta2: float = bounded(
        0.999, **RATE, says="(Adam's second-moment decay) must be in [0, 1), e.g. 0.999 or SASRec's 0.98"
    )
    grad_clip: float = bounded(0.0, low=0, why="0 = off")  # max global grad norm
    # optimizer steps of linear warm-up from lr / warmup_steps to lr (BERT)
    warmup_steps: int = bounded(0, low=0, why="0 = no warm-up")
    lr_schedule: str = choice("constant", "constant", "linear")  # linear: decay to 0 at max_epochs (BERT's)
    max_epochs: int = bounded(200, **SIZE)  # the epoch budget (patience and ASHA may stop earlier)
    # a step budget: the run ends at its first validation pass at or past this many optimizer steps, as ASHA's
    # max_t in steps ends a search trial (a seed re-run of one gets it)
    max_steps: int = bounded(0, low=0, why="0 = none, max_epochs ends the run")
    eval_every: int = bounded(1, **SIZE)  # epochs between validation passes
    # validation passes without improvement before stopping
    patience: int = bounded(10, low=0, why="0 = never stop early")
    # optimizer steps before patience may stop a run (a plateau is not a verdict)
    min_steps: int = bounded(0, low=0, why="0 = patience may stop at any step")
    monitor: str = "ndcg@10"  # validation metric for early stopping and model selection
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    # torch CPU threads; above MAX_THREADS torch fails to start (an ImportError deep in its import)
    threads: int = bounded(
        0,
        low=0,
        why="0 = torch's default",
        high=MAX_THREADS,
        high_why="more than any machine's cores; 0 = torch's default",
    )
    precision: str = choice("fp32", "fp32", "bf16")  # bf16: the item-scoring products of the CE in bfloat16

    @property
    def monitor_key(self) -> str:
        """The evaluation dict's key for `monitor` (HR@k is reported as recall@k)."""
        return self.monitor.replace("hr@", "recall@")


@dataclass
class EvalConfig:
    # the cut-offs k of every metric (recall@k, ndcg@k, mrr@k)
    ks: list[int] = bounded(  # noqa: RUF009 (bounded is a field(), with a default_factory)
        factory=lambda: [1, 5, 10, 20, 50],
        low=1,
        says="must be a non-empty list of distinct positive integers",
    )
    filter_seen: str = choice("none", "none", "history")  # remove the user's earlier items from the ranking
    # 0 = exact full ranking over all items; N = rank against N fixed negatives
    sampled_negatives: int = bounded(0, low=0)
    sample_seed: int = bounded(12345, **SEED)  # draws eval.sampled_negatives, the same for every run
    # > 0: greedy rollouts of this many steps from every test user's history after testing
    # (modsar.evaluation.rollouts); their metrics become the row's generate.* columns
    generate_steps: int = bounded(0, low=0, why="0 = no rollouts")


def _plain_dict(items: list[tuple[str, Any]]) -> dict[str, Any]:
    """`asdict`'s dict maker: an enum value (`task`) is written as its text, so that checkpoints (read
    with torch.load(weights_only=True), which refuses unknown classes), rows and JSON hold "ae", never
    `Task.AE`."""
    return {key: value.value if isinstance(value, enum.Enum) else value for key, value in items}


@dataclass
class Config:
    dataset: str = "synthetic"  # a prepared dataset's name (modsar data list)
    # the AE/AR switch: attention direction AND objective
    task: Task = choice(Task.AR, Task.AR, Task.AE)  # noqa: RUF009 (choice is a field(); Task is immutable)
    # AE cloze masking probability (ignored by AR)
    mask_prob: float = bounded(0.2, low=0, high=1, open_low=True, open_high=True)
    seed: int = bounded(0, **SEED)  # every random draw of a run: init, batches, masks, dropout
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        if self.task in [t.value for t in Task]:  # Config(task="ae") holds the member too
            self.task = Task(self.task)

    def to_dict(self) -> dict[str, Any]:
        """The tree of plain values (`task` as "ae" / "ar"), with the own settings section of the backbone
        (`model.<backbone>`) where it has one."""
        tree = dataclasses.asdict(self, dict_factory=_plain_dict)
        own = self.model.backbone
        if own in SECTIONS:
            tree["model"][own] = dataclasses.asdict(getattr(self.model, own), dict_factory=_plain_dict)
        return tree

    def stored(self) -> dict[str, Any]:
        """What rows and checkpoints record: the modular backbone's `auto` norm is written as what it is,
        post, because before 0.2 it meant pre; rows and checkpoints of the two never pass for one another."""
        tree = self.to_dict()
        if self.model.backbone == "modular" and self.model.norm == "auto":
            tree["model"]["norm"] = self.model.norm_style
        return tree

    @classmethod
    def from_stored(cls, tree: dict[str, Any], where: str = "config") -> Config:
        """The inverse of `stored`: a modular `auto` norm can only come from before 0.2, when it meant pre."""
        model = tree.get("model", {})
        if model.get("backbone", "modular") == "modular" and model.get("norm") == "auto":
            tree = {**tree, "model": {**model, "norm": "pre"}}
        return cls.from_dict(tree, where)

    def flat(self) -> dict[str, Any]:
        """Dotted-name view (``model.hidden_size``) of the stored form: the names used in YAML, CLI and
        Parquet."""
        return flatten(self.stored())

    @classmethod
    def from_dict(
        cls, values: dict[str, Any], where: str = "config", changes: dict[str, Any] | None = None
    ) -> Config:
        """A full tree as `to_dict`/`stored` write it (checkpoints, search.json), older trees included. With
        `changes` (dotted keys: a search trial's point), the tree with those applied, validated once as a
        config asked for now (`validate`'s stored=False), not as a record."""
        flat = flatten(values)
        if "model.user_embedding" in flat:  # before 0.3: SSE-PT's switch, now user_fusion=concat
            flat["model.user_fusion"] = "concat" if flat.pop("model.user_embedding") else "none"
        cfg = cls()
        apply_overrides(cfg, {**flat, **(changes or {})}, where, stored=changes is None)
        return cfg


def flatten(tree: Mapping[str, Any], prefix: str = "", where: str = "config") -> dict[str, Any]:
    """The dotted keys of a tree that nests sections (``{"model": {"hidden_size": 8}}``), dotted names
    (``{"model.hidden_size": 8}``) or both. A key given both ways is refused (`where` names the source):
    which value won would depend on the order the two are written in."""
    out: dict[str, Any] = {}
    written: dict[str, tuple[str, ...]] = {}  # each dotted key: the keys it was written as
    try:
        leaves = _leaves(tree, ())
    except ValueError as exc:
        raise ModsarError(f"{where}: '{prefix}{exc}' contains itself; give the keys as values") from None
    for path, value in leaves:
        name = prefix + ".".join(path)
        if name in written:
            raise ModsarError(
                f"{where}: '{name}' is given twice, as {_as_written(written[name])} and as "
                f"{_as_written(path)}; give it once"
            )
        written[name], out[name] = path, value
    return out


def _leaves(tree: Mapping[Any, Any], path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    """(the keys leading to it, value) of every value in `tree` that is not itself a mapping, in the order
    written; without recursion, so a hostile nesting depth is no RecursionError. A mapping that contains
    itself is a ValueError naming the key that leads back into it."""
    found: list[tuple[tuple[str, ...], Any]] = []
    stack = [(path, tree, iter(tree.items()))]
    while stack:
        where, _, items = stack[-1]
        step = next(items, None)
        if step is None:
            stack.pop()
        elif isinstance(step[1], Mapping):
            if any(step[1] is mapping for _, mapping, _ in stack):
                raise ValueError(".".join((*where, str(step[0]))))
            stack.append(((*where, str(step[0])), step[1], iter(step[1].items())))
        else:
            found.append(((*where, str(step[0])), step[1]))
    return found


def _as_written(path: tuple[str, ...]) -> str:
    """How a key was written: ``model.hidden_size``, or nested ``model: {hidden_size}``."""
    return ": {".join(path) + "}" * (len(path) - 1)


def _fields(obj: Any) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(obj)}


def all_keys(cfg: Config | None = None) -> list[str]:
    return sorted((cfg or Config()).flat())


def _coerce(value: Any, annotation: str, key: str, where: str) -> Any:
    """Check `value` against a field's type. Any integer type (numpy's too) is an int, and a float field
    takes an integer or the text of a YAML 1.2 number ("1e-3", quoted in YAML or given in Python); other
    text ("1_000", "nan") and booleans are refused, as YAML 1.2 reads them."""
    expected = {"int": int, "float": float, "bool": bool, "str": str, "list[int]": list}[annotation]
    if expected is int or expected is float:
        return _number(value, expected, key, where)
    if expected is list:
        if not isinstance(value, list) or not all(_integral(v) for v in value):
            raise ModsarError(f"{where}: '{key}' must be a list of integers, got {shown(value)}")
        return [int(v) for v in value]
    import datetime

    if expected is str and isinstance(value, datetime.date):  # a date given in Python: the text was meant,
        return value.isoformat()  # and validate says what is wrong with it (split_dates needs two)
    if key == "data.split_dates" and isinstance(value, list):  # [A, B] (YAML's list) means "A,B": validate
        if not value:  # then says what is wrong with its dates, as for the text
            raise ModsarError(
                f"{where}: '{key}' needs two ISO dates, the validation cut then the test cut, and has "
                'none (e.g. "2000-11-20,2000-12-01"); got []'
            )
        return ",".join(v.isoformat() if isinstance(v, datetime.date) else str(v) for v in value)
    if not isinstance(value, expected):
        raise ModsarError(f"{where}: '{key}' must be {expected.__name__}, got {shown(value)}")
    return value


FIELD_TYPES = ("int", "float", "bool", "str", "list[int]")  # what a config field may hold


def annotation_name(annotation: Any) -> str:
    """A field's type as `FIELD_TYPES` names it: annotations are text under postponed evaluation (the core's),
    types where a plugin's section module does not postpone them."""
    if isinstance(annotation, str) or hasattr(annotation, "__origin__"):  # "float", list[int]
        return str(annotation)
    return getattr(annotation, "__name__", str(annotation))


def field_problem(f: dataclasses.Field, value: Any, key: str) -> str | None:
    """What is wrong with `value` as field `f`'s value (its type, choices, bounds, a finite number), or None:
    a backbone plugin's section defaults are checked with it when it registers."""
    try:
        value = _coerce(value, annotation_name(f.type), key, "default")
    except ModsarError as exc:
        return str(exc)
    if f.metadata.get("choices") and value not in f.metadata["choices"]:
        return f"'{key}' must be one of {', '.join(map(str, f.metadata['choices']))}; got {shown(value)}"
    bounds = f.metadata.get("bounds")
    numbers = value if isinstance(value, list) else [value]
    if bounds is not None and not all(isinstance(v, (int, float)) for v in numbers):
        return f"'{key}' has bounds, and only a number (or a list of them) has a range"
    if any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
        return f"'{key}' must be a finite number; got {value}"
    problem = bounds.problem(value) if bounds is not None else None
    return f"'{key}' {problem}; got {value}" if problem else None


def _integral(value: Any) -> bool:
    """An integer of any integer type (int, numpy's), never a boolean (YAML's true is no number)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _number(value: Any, expected: type, key: str, where: str) -> int | float:
    """`value` as the int or float a number field holds, or the field's one-line type error."""
    if expected is int:
        if isinstance(value, bool):
            raise ModsarError(f"{where}: '{key}' must be an integer, got {value!r}")
        if _integral(value):
            return int(value)
        raise ModsarError(f"{where}: '{key}' must be int, got {shown(value)}")
    number: Any = value
    if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
        number = _float_text(value.strip())
    if isinstance(number, numbers.Real) and not isinstance(number, bool):
        try:
            return float(number)
        except OverflowError:  # an integer beyond any float
            raise ModsarError(
                f"{where}: '{key}' must be a finite number of float32 range; got {shown(value)}"
            ) from None
    raise ModsarError(f"{where}: '{key}' must be float, got {shown(value)}")


def shown(value: Any, limit: int = 80) -> str:
    """`repr(value)` for a one-line message, cut to about `limit` characters: a hostile value (a megabyte of
    text, an integer of thousands of digits, which Python will not even print) stays short and printable."""
    if isinstance(value, int) and value.bit_length() > 256:
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1:,} digits"
    try:
        text = repr(value)
    except ValueError:  # an integer too long for Python to print, inside a list
        return f"a {type(value).__name__} holding an integer too long to print"
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text):,} characters)"


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
        if part not in fields and isinstance(node, ModelConfig) and _is_section(part):
            if depth == len(parts) - 1:
                raise ModsarError(f"{where}: '{key}' is a section; set one of its keys, e.g. '{key}.<name>'")
            node = getattr(node, part)
            continue
        if part not in fields:
            scope = ".".join(parts[:depth]) or "the top level"
            known = ", ".join(sorted([*fields, *(SECTIONS if isinstance(node, ModelConfig) else ())]))
            hint = ""
            if isinstance(node, ModelConfig) and depth < len(parts) - 1:  # model.<name>.<field>
                hint = f"; if '{part}' is a plugin backbone's settings, name its module in $MODSAR_PLUGINS"
            raise ModsarError(
                f"{where}: unknown key '{key}' ('{part}' is not in {scope}; allowed: {known}){hint}"
            )
        f = fields[part]
        if depth < len(parts) - 1:
            node = getattr(node, part)
            if not dataclasses.is_dataclass(node):
                raise ModsarError(f"{where}: '{'.'.join(parts[: depth + 1])}' is a value, not a section")
            continue
        if dataclasses.is_dataclass(getattr(node, part)):
            raise ModsarError(f"{where}: '{key}' is a section; set one of its keys, e.g. '{key}.<name>'")
        # an enum field (task) is given as text, read into its member once allowed; annotations are strings
        # (postponed evaluation)
        enum_type = type(f.default) if isinstance(f.default, enum.Enum) else None
        value = _coerce(value, "str" if enum_type else annotation_name(f.type), key, where)
        allowed = f.metadata.get("choices")
        if allowed and value not in allowed:
            raise ModsarError(
                f"{where}: '{key}' must be one of {', '.join(map(str, allowed))}; got {shown(value)}"
            )
        setattr(node, part, enum_type(value) if enum_type else value)


def _is_section(name: str) -> bool:
    """Whether `name` is a backbone's settings section (plugins loaded first where it is not yet known)."""
    if name not in SECTIONS:
        for load in SECTION_LOADERS:
            load()
    return name in SECTIONS


def apply_overrides(
    cfg: Config, values: dict[str, Any], where: str = "config", stored: bool = False
) -> Config:
    for key, value in values.items():
        set_value(cfg, key, value, where)
    validate(cfg, where, stored)
    return cfg


def config_values(cfg: Config, where: str = "config") -> dict[str, Any]:
    """The dotted values a Config object holds, for `apply_overrides` to set on a fresh one: an object built
    or changed in Python (`cfg.model.norm = "bogus"`, `cfg.train.lr = "abc"`) is then checked exactly as a
    mapping or an override is, its types and choices included, which `validate` alone does not read. An
    attribute that is no field (a typo: `cfg.train.max_epoch = 3`) is an unknown key, not ignored."""
    values: dict[str, Any] = {}
    _section_values(cfg, "", where, values, [])
    return values


def _section_values(node: Any, prefix: str, where: str, values: dict[str, Any], path: list[Any]) -> None:
    """`config_values` of one section (a dataclass) into `values`; `path` holds the sections above it."""
    fields = _fields(node)
    stray = next((name for name in vars(node) if name not in fields and name != "_sections"), None)
    if stray is not None:
        set_value(Config(), f"{prefix}{stray}", None, where)  # says: unknown key, and what is allowed
    for name in fields:
        value = getattr(node, name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            if any(value is above for above in (*path, node)):
                raise ModsarError(f"{where}: '{prefix}{name}' holds a section that contains it")
            _section_values(value, f"{prefix}{name}.", where, values, [*path, node])
        elif isinstance(value, Mapping):  # a section given as a mapping: its keys, checked by name
            values.update(flatten(value, f"{prefix}{name}.", where))
        else:
            values[f"{prefix}{name}"] = value
    for name, section in vars(node).get("_sections", {}).items():  # a model's backbone sections
        _section_values(section, f"{prefix}{name}.", where, values, [*path, node])


# YAML 1.2's core schema: what a plain (unquoted) value a user types or writes means. PyYAML implements YAML
# 1.1, where 010 is 8 (octal), 1:30 is 90 (base 60), on/yes/n are booleans and 1_000 is 1000, even under a
# `%YAML 1.2` directive; here they are 10 and the texts "1:30", "on", "yes", "n" and "1_000".
_NULL = re.compile(r"(?:~|null|Null|NULL|)\Z")
_BOOL = re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z")
_INT = re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z")
_FLOAT_NUMBER = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?\Z")
_FLOAT_TEXT = re.compile(
    r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
)
# Values a document may expand into through its aliases beyond those written. An alias shares one object,
# but the checks and messages that read a file walk (and repr) every copy: nested aliases (a "billion laughs"
# file) would exhaust memory there. A config or a space needs a few hundred values.
MAX_ALIAS_VALUES = 10_000


class DuplicateKey(yaml.YAMLError):
    """A mapping gives one key twice: YAML keeps only the last, so one of the two would be lost silently."""

    def __init__(self, key: Any, lines: tuple[int, int]) -> None:
        super().__init__(f"key {key!r} repeated")
        self.key, self.lines = key, lines


class AliasGrowth(yaml.YAMLError):
    """A document whose aliases, copied out, hold more than MAX_ALIAS_VALUES values, or a value that contains
    itself (`cycle`)."""

    def __init__(self, cycle: bool) -> None:
        super().__init__("aliases expand too far")
        self.cycle = cycle


class YamlLoader(yaml.SafeLoader):
    """The loader of every YAML a user types or writes (overrides, --config files, search spaces): a
    SafeLoader (nothing is evaluated) reading plain values by YAML 1.2's core schema, refusing a key given
    twice in one mapping, and a document whose aliases expand past MAX_ALIAS_VALUES. The merge key (<<) is
    kept: its keys may be overridden in the mapping that merges them."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:  # type: ignore[override]
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # keys a merge (<<) brings in may be overridden; a non-scalar key is refused later
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise DuplicateKey(key, (seen[key], line))
            seen[key] = line
        return super().construct_mapping(node, deep)

    def get_single_data(self) -> Any:
        """The document, once its size with every alias copied out is known to be small (_alias_growth)."""
        node = self.get_single_node()
        if node is None:
            return None
        _alias_growth(node)
        return self.construct_document(node)


def _core_scalar(kind: str, parse: Callable[[str], Any]) -> Callable[[YamlLoader, yaml.ScalarNode], Any]:
    """The constructor of a core-schema `kind` (int, float, bool), for plain values and explicit tags
    (`!!int 010` is 10 too); a text the schema does not read as one is a YAML error at its line."""

    def construct(loader: YamlLoader, node: yaml.ScalarNode) -> Any:
        text = loader.construct_scalar(node)
        try:
            return parse(text)
        except ValueError:  # not the kind's text, or (ValueError too) an integer of over 4,300 digits
            raise yaml.constructor.ConstructorError(
                None, None, f"{shown(text)} is not a YAML 1.2 {kind}", node.start_mark
            ) from None

    return construct


def _int_text(text: str) -> int:
    if not _INT.match(text):
        raise ValueError(text)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _float_text(text: str) -> float:
    if not _FLOAT_TEXT.match(text):
        raise ValueError(text)
    if _FLOAT_NUMBER.match(text):
        return float(text)
    return math.nan if text.endswith(("nan", "NaN", "NAN")) else -math.inf if text[0] == "-" else math.inf


def _bool_text(text: str) -> bool:
    if not _BOOL.match(text):
        raise ValueError(text)
    return text[0] in "tT"


YamlLoader.yaml_implicit_resolvers = {}  # YAML 1.1's resolvers replaced, for this loader only
for _tag, _pattern, _first in (
    ("null", _NULL, ["~", "n", "N", ""]),
    ("bool", _BOOL, list("tTfF")),
    ("int", _INT, list("-+0123456789")),  # before float, which reads integers too
    ("float", _FLOAT_TEXT, list("-+.0123456789")),
    ("merge", re.compile(r"<<\Z"), ["<"]),
):
    YamlLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", _pattern, _first)
for _tag, _parse in (("int", _int_text), ("float", _float_text), ("bool", _bool_text)):
    YamlLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _core_scalar(_tag, _parse))


def _alias_growth(root: yaml.Node) -> None:
    """Raises AliasGrowth when the document, with its aliases copied out, holds more than MAX_ALIAS_VALUES
    values beyond those written, or a value that contains itself; counted over the composed nodes (each
    once), without building anything."""
    cap = 10**12  # sizes are kept below it, so nested aliases cannot make the count itself grow without end
    size: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose subtree is being counted: one met again inside it is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        children: list[yaml.Node] = (
            [n for pair in node.value for n in pair]
            if isinstance(node, yaml.MappingNode)
            else list(node.value)
            if isinstance(node, yaml.SequenceNode)
            else []
        )
        if done:
            size[id(node)] = min(cap, 1 + sum(size[id(child)] for child in children))
            open_.discard(id(node))
        elif id(node) in open_:
            raise AliasGrowth(cycle=True)
        elif id(node) not in size:
            open_.add(id(node))
            stack.append((node, True))
            stack += [(child, False) for child in children if id(child) not in size]
    if size[id(root)] - len(size) > MAX_ALIAS_VALUES:
        raise AliasGrowth(cycle=False)


def read_yaml(text: str) -> Any:
    """One YAML document as ModSAR reads every YAML a user gives it (`YamlLoader`); yaml.YAMLError (its
    DuplicateKey and AliasGrowth included) where it is not one."""
    try:
        return yaml.load(text, Loader=YamlLoader)  # a SafeLoader: nothing is evaluated
    except RecursionError:  # PyYAML composes nested collections recursively
        raise yaml.YAMLError("nests collections too deeply") from None


def load_yaml_file(path: Path, kind: str) -> Any:
    """The document of a user's YAML file (`kind`: "config" or "space"); a file that cannot be read, is no
    UTF-8 text, is invalid YAML, gives a key twice or expands its aliases too far is one ModsarError naming it
    (and the line, or the key)."""
    what = f"{kind} file '{path}'"
    try:
        return read_yaml(path.read_text())
    except UnicodeDecodeError:
        raise ModsarError(f"{what} is not a text (UTF-8) file") from None
    except OSError as exc:
        raise ModsarError(f"{what} cannot be read: {exc.strerror or exc}") from None
    except AliasGrowth as exc:
        grows = (
            "holds a value that contains itself through a YAML alias"
            if exc.cycle
            else f"expands its YAML aliases (*name) into more than {MAX_ALIAS_VALUES:,} values beyond those "
            "written (aliases nested in anchors)"
        )
        raise ModsarError(
            f"{what} {grows}; a {kind} needs a few hundred values: write them out, or use anchors that do "
            "not nest"
        ) from None
    except DuplicateKey as exc:
        raise ModsarError(
            f"{what} gives the key {shown(exc.key)} twice in one mapping (lines {exc.lines[0]} and "
            f"{exc.lines[1]}); YAML would keep only the last: remove one"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or (str(exc) if type(exc) is yaml.YAMLError else "")
        raise ModsarError(f"{what} is not valid YAML{at}{f': {problem}' if problem else ''}") from None


def parse_override(text: str) -> tuple[str, Any]:
    """``model.hidden_size=64`` -> ("model.hidden_size", 64); the value is read as YAML 1.2 (`read_yaml`),
    and kept as text where it is no YAML value."""
    if "=" not in text:
        raise ModsarError(f"override '{text}' is not of the form key=value (e.g. model.hidden_size=64)")
    key, raw = text.split("=", 1)
    try:
        value = read_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    if key.strip() in NAME_KEYS and not isinstance(value, str):  # dataset=123, =null, =true: a name, as typed
        value = raw
    return key.strip(), value


NAME_KEYS = ("dataset",)  # keys whose value names a folder: text whatever YAML would read it as


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults <- YAML file (nested or dotted keys, each given once) <- ``key=value`` overrides. A file the
    checks refuse on its own is still taken where the overrides complete it (it sets a backbone's own keys,
    an override chooses that backbone); where they leave its problem as it was, the file's line says it."""
    cfg = Config()
    refused: ModsarError | None = None
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ModsarError(f"config file '{path}' does not exist")
        data = load_yaml_file(path, "config")
        data = {} if data is None else data  # an empty file: the defaults
        if not isinstance(data, dict):
            raise ModsarError(f"config file '{path}' must hold a mapping of keys to values")
        for key, value in flatten(data, where=str(path)).items():
            set_value(cfg, key, value, str(path))
        try:
            validate(cfg, str(path))  # the checks read, never set: no copy needed
        except ModsarError as error:
            refused = error
    for text in overrides or []:
        key, value = parse_override(text)
        set_value(cfg, key, value, "override")
    try:
        validate(cfg, "config")
    except ModsarError as error:  # the file's own line where the overrides left its problem as it was
        if refused is not None and str(error).removeprefix("config: ") == str(refused).removeprefix(
            f"{path}: "
        ):
            raise refused from None
        raise
    return cfg


Bad = Callable[[str], NoReturn]
Check = Callable[[Config, Bad, bool], None]  # (config, how to refuse, stored): refuses what cannot hold

# The backbone registry's checks (modsar.model.registry.check_config), added when it is imported, which the
# package does on import (modsar/__init__.py): the registry sits above the config it checks, never below it.
BACKBONE_CHECKS: list[Check] = []


def _numbers_fit(cfg: Config, bad: Bad, stored: bool) -> None:
    """Every number is finite in float32 (YAML reads .nan, .inf), not subnormal there (unless its own range
    says more), fits a Parquet int64 column, and stays under the size a model can be built with
    (`SIZE_LIMITS`)."""
    bounds = {key: b for key, b, _ in _bounded_values(cfg)}
    for key, value in cfg.flat().items():
        if isinstance(value, float) and not (math.isfinite(value) and abs(value) <= FLOAT32_MAX):
            bad(f"'{key}' must be a finite number of float32 range; got {value}")
        subnormal = isinstance(value, float) and 0 < abs(value) < FLOAT32_TINY
        if subnormal and (key not in bounds or bounds[key].admits(value)):  # else its range says more
            zero = "0 or " if key not in bounds or bounds[key].admits(0.0) else ""
            bad(
                f"'{key}' must be {zero}at least 2**-126 (about 1.18e-38) in size, float32's smallest normal "
                f"number: the model computes in float32, where {value} is subnormal or 0"
            )
        for number in value if isinstance(value, list) else [value]:
            if isinstance(number, int) and not -(2**63) <= number < 2**63:
                bad(f"'{key}' must fit in 64 bits; got {shown(number)}")
        limit = SIZE_LIMITS.get(key)
        if limit is not None and value > limit:
            bad(f"'{key}' must be <= {limit:,} (no model of that size fits in memory); got {value:,}")


def _bounded_values(node: Any, prefix: str = "") -> list[tuple[str, Bounds, Any]]:
    """(dotted key, declared bounds, value) of every bounded field under `node`, in declaration order."""
    found = []
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            found += _bounded_values(value, f"{prefix}{f.name}.")
        elif "bounds" in f.metadata:
            found.append((f"{prefix}{f.name}", f.metadata["bounds"], value))
    for name, section in vars(node).get("_sections", {}).items():  # a model's backbone sections
        found += _bounded_values(section, f"{prefix}{name}.")
    return found


def _check_bounds(cfg: Config, bad: Bad, first: bool) -> None:
    """The fields whose `Bounds.first` is `first` hold values in the range declared on them (`bounded`)."""
    for key, bounds, value in _bounded_values(cfg):
        problem = bounds.problem(value) if bounds.first == first else None
        if problem is not None:
            bad(f"'{key}' {problem}; got {value}")


def _sizes_within_bounds(cfg: Config, bad: Bad, stored: bool) -> None:
    _check_bounds(cfg, bad, first=True)


def _values_within_bounds(cfg: Config, bad: Bad, stored: bool) -> None:
    _check_bounds(cfg, bad, first=False)


def _bf16_needs_the_fused_ce(cfg: Config, bad: Bad, stored: bool) -> None:
    if cfg.train.precision == "bf16" and (cfg.loss.name != "ce" or not cfg.loss.fused):
        bad(
            "train.precision=bf16 runs the fused full-softmax CE's products in bfloat16, and this run has "
            f"none (loss.name={cfg.loss.name}, loss.fused={str(cfg.loss.fused).lower()}); use "
            "train.precision=fp32"
        )


def _heads_divide_the_hidden_size(cfg: Config, bad: Bad, stored: bool) -> None:
    m = cfg.model
    if m.hidden_size % m.num_heads:
        bad(f"'model.hidden_size' ({m.hidden_size}) must be divisible by 'model.num_heads' ({m.num_heads})")


def _backbone_accepts(cfg: Config, bad: Bad, stored: bool) -> None:
    for check in BACKBONE_CHECKS:  # the backbone exists, has the task and accepts these settings
        check(cfg, bad, stored)


def _gbce_t_needs_gbce(cfg: Config, bad: Bad, stored: bool) -> None:
    """gBCE's calibration means nothing to another loss (a stored record kept the default's value)."""
    default = LossConfig().gbce_t
    if not stored and cfg.loss.name != "gbce" and cfg.loss.gbce_t != default:
        bad(
            f"'loss.gbce_t' calibrates loss.name=gbce only, and this run's loss is {cfg.loss.name}: leave it "
            f"at {default}"
        )


def _local_heads_are_heads(cfg: Config, bad: Bad, stored: bool) -> None:
    m = cfg.model
    if not 0 <= m.local_heads <= m.num_heads:
        bad(f"'model.local_heads' must be between 0 and model.num_heads ({m.num_heads}); got {m.local_heads}")


def _user_sse_needs_a_user(cfg: Config, bad: Bad, stored: bool) -> None:
    if cfg.model.user_sse_prob and cfg.model.user_fusion == "none":
        bad("'model.user_sse_prob' needs a user in the model ('model.user_fusion' concat, token or bias)")


def _user_size_is_concats(cfg: Config, bad: Bad, stored: bool) -> None:
    """`user_size` is the width of concat's user vector, beside an item vector that keeps at least one."""
    m = cfg.model
    if m.user_fusion == "concat":
        user = m.user_width
        if not 0 < user < m.hidden_size:
            bad(f"'model.user_size' must be between 1 and hidden_size - 1; got {user}")
    elif m.user_size:
        bad(
            "'model.user_size' is the width of user_fusion=concat's vector; "
            f"user_fusion={m.user_fusion} uses the hidden size; leave it at 0"
        )


def _split_quantiles_in_order(cfg: Config, bad: Bad, stored: bool) -> None:
    if not 0.0 < cfg.data.split_valid < cfg.data.split_test < 1.0:
        bad(
            f"'data.split_valid' and 'data.split_test' must be quantiles with 0 < valid < test < 1; got "
            f"{cfg.data.split_valid} and {cfg.data.split_test}"
        )


def _split_dates_parse(cfg: Config, bad: Bad, stored: bool) -> None:
    """Two ISO dates, in order (the data module reads them, and says which rule a text breaks)."""
    if cfg.data.split_dates:
        try:
            parse_dates(cfg.data.split_dates)
        except ValueError as exc:  # which rule: two dates, each ISO, in order
            bad(f"'data.split_dates' {exc} (e.g. \"2000-11-20,2000-12-01\"); got {cfg.data.split_dates!r}")


def _device_is_named_right(cfg: Config, bad: Bad, stored: bool) -> None:
    """The device's name (whether a GPU is present is asked when a run starts); a stored config's device was
    taken by the machine that ran it."""
    from modsar.devices import name_problem  # torch-free

    if not stored and (device := name_problem(cfg.train.device)):
        bad(device)


def _prefixes_are_causal(cfg: Config, bad: Bad, stored: bool) -> None:
    if cfg.data.samples == "prefixes" and cfg.task is not Task.AR:
        bad(
            "'data.samples=prefixes' labels each training prefix's next item, a causal objective; task=ae "
            "masks whole windows: use data.samples=sequences, or task=ar"
        )


def _dataset_is_a_name(cfg: Config, bad: Bad, stored: bool) -> None:
    """The dataset names a folder under the data root: no path, control character or overlong name
    (modsar.outputs.check_name). A stored config's was checked when it ran, and loading its data checks it."""
    from modsar.outputs import check_name

    if not stored:
        try:
            check_name(cfg.dataset, "'dataset'")
        except ModsarError as exc:
            bad(str(exc))


def _ks_are_distinct(cfg: Config, bad: Bad, stored: bool) -> None:
    """Each cut-off once: a repeated k would be one metric column computed twice, and a search's selection
    and report would count it twice."""
    ks = cfg.eval.ks
    repeated = next((k for i, k in enumerate(ks) if k in ks[:i]), None)
    if repeated is not None:
        bad(f"'eval.ks' lists {repeated} twice; list each cut-off once; got {shown(ks)}")


def _monitor_is_reported(cfg: Config, bad: Bad, stored: bool) -> None:
    metric_names = {f"{name}@{k}" for name in ("recall", "ndcg", "mrr", "hr") for k in cfg.eval.ks}
    if cfg.train.monitor not in metric_names:
        bad(f"'train.monitor' must be a metric at one of eval.ks, e.g. ndcg@10; got {cfg.train.monitor!r}")


# What `validate` checks, in order; the first failure is the message. The sizes' bounds come before the rules
# that compute with them; the other fields' bounds after the backbone's checks (a backbone refusing a setting
# it does not read says more than the setting's range) and before the rules that read those fields.
CHECKS: tuple[Check, ...] = (
    _dataset_is_a_name,
    _bf16_needs_the_fused_ce,
    _numbers_fit,
    _sizes_within_bounds,
    _heads_divide_the_hidden_size,
    _backbone_accepts,
    _gbce_t_needs_gbce,
    _local_heads_are_heads,
    _user_size_is_concats,
    _values_within_bounds,
    _user_sse_needs_a_user,
    _split_quantiles_in_order,
    _split_dates_parse,
    _device_is_named_right,
    _prefixes_are_causal,
    _ks_are_distinct,
    _monitor_is_reported,
)


def validate(cfg: Config, where: str = "config", stored: bool = False) -> None:
    """The checks a single field's type and choices cannot express (`CHECKS`); the first that fails is a
    `ModsarError` prefixed with `where`. `stored`: a record an earlier run wrote (a checkpoint, a search's
    base), which keeps another backbone's settings: they were no-ops there, and refusing them would make old
    results unreadable; what a user asks for now is refused instead."""

    def bad(msg: str) -> NoReturn:
        raise ModsarError(f"{where}: {msg}")

    for check in CHECKS:
        check(cfg, bad, stored)


def parse_dates(text: str):
    """Two comma-separated ISO dates as timezone-aware datetimes (UTC unless they say otherwise); ValueError
    saying which rule is broken (not two, one is no date, the first is not earlier) for config.validate."""
    import datetime as dt

    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) != 2:
        count = {0: "none", 1: "one"}.get(len(parts), str(len(parts)))
        raise ValueError(f"needs two ISO dates, the validation cut then the test cut, and has {count}")
    dates = []
    for part in parts:
        try:
            date = dt.datetime.fromisoformat(part)
        except ValueError:
            raise ValueError(
                f"needs two ISO dates, and {part!r} is not one (YYYY-MM-DD or YYYY-MM-DDTHH:MM[+HH:MM])"
            ) from None
        dates.append(date if date.tzinfo else date.replace(tzinfo=dt.timezone.utc))
    if not dates[0] < dates[1]:
        raise ValueError(
            f"needs the validation cut before the test cut, and {parts[0]} is not before {parts[1]}"
        )
    return dates[0], dates[1]
