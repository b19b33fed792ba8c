"""modsar analyze on trained synthetic checkpoints: exact at alpha = 1, mixing rises as alpha falls,
the +LN decomposition sums to the real layer output, and the command writes its table and plots."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch

from modsar.analyze import Probe, contributions, mixing_ratios, residual_scale, run
from modsar.cli import main
from modsar.config import load_config
from modsar.train import run_trial


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A briefly trained AR model per norm placement (the data root is shared across this module)."""
    root = tmp_path_factory.mktemp("analyze")
    paths = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MODSAR_DATA", str(root / "data"))
        for norm in ("pre", "post"):
            cfg = load_config(None, ["train.max_epochs=6", "train.patience=0", "model.hidden_size=32",
                                     f"model.norm={norm}", "model.num_heads=2", "seed=3"])
            paths[norm] = root / f"{norm}.pt"
            run_trial(cfg, checkpoint_path=paths[norm], progress=False, evaluate_test=False)
    return root / "data", paths


def test_alpha_one_reproduces_standard_metrics_exactly(checkpoints):
    data, paths = checkpoints
    probe = Probe(paths["pre"], str(data))
    standard = probe.metrics()
    with residual_scale(probe.model, 1.0):
        assert probe.metrics() == standard
    with residual_scale(probe.model, 0.5):
        assert probe.metrics() != standard


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_mixing_ratio_rises_as_alpha_falls(checkpoints, norm):
    data, paths = checkpoints
    probe = Probe(paths[norm], str(data))
    ratios = [mixing_ratios(probe, alpha)["mixing_res"] for alpha in (1.0, 0.6, 0.2)]
    assert ratios[0] < ratios[1] < ratios[2]


def test_ln_decomposition_sums_to_the_layer_output(checkpoints):
    data, paths = checkpoints
    probe = Probe(paths["post"], str(data))
    block = probe.model.blocks[0]
    inputs, users = probe.inputs[:16], probe.user_ids[:16]
    captured = []
    hook = block.register_forward_hook(lambda mod, args, out: captured.append((args[0], args[1])))
    with torch.no_grad():
        probe.model(inputs, users)
        hook.remove()
        x, mask = captured[0]
        for alpha in (1.0, 0.4):
            attn_out, probs = block.attn(x, mask, True)
            real = block.norm1(alpha * x + attn_out)  # the post-norm sub-layer output
            ln = contributions(block, x, probs, alpha)["ln"]
            z = alpha * x + attn_out
            s = torch.sqrt(z.var(-1, unbiased=False) + block.norm1.eps)[..., None]
            b_o = block.attn.proj.bias
            rebuilt = ln.sum(2) + block.norm1.weight * (b_o - b_o.mean()) / s + block.norm1.bias
            torch.testing.assert_close(rebuilt, real, rtol=0, atol=1e-5)


def test_shuffle_and_hrli_signature_on_an_ar_model(checkpoints):
    data, paths = checkpoints
    table = run(paths["pre"], ["shuffle", "hrli"], str(data))
    value = dict(zip(table["quantity"], table["value"], strict=True))
    assert value["ndcg@10 full"] < 0.5 * value["ndcg@10 original"]  # order matters to this model
    assert value["ndcg@10 partial"] > value["ndcg@10 full"]  # keeping the last item keeps most of it
    assert 0 <= value["hrli@1"] <= 1 and (table["n"] > 0).all()


def test_nonfinal_and_recovery_follow_their_definitions(checkpoints):
    data, paths = checkpoints
    table = run(paths["pre"], ["nonfinal", "recovery"], str(data), alphas=(0.0, 0.5, 1.0))
    value = {(q, a): v for q, a, v in zip(table["quantity"], table["alpha"], table["value"], strict=True)}
    assert value[("recovery rate (test)", 1.0)] == 0.0  # Rec(1) = 0 by definition
    probe = Probe(paths["pre"], str(data))
    assert value[("hr@10 at L", 1.0)] == pytest.approx(probe.metrics()["recall@10"])
    assert value[("hr@10 (test)", 1.0)] == pytest.approx(probe.metrics()["recall@10"])
    chosen = next(a for (q, a) in value if q == "alpha* (validation, epsilon=0.01)")
    assert chosen in (0.0, 0.5, 1.0)


def test_select_alpha_rule():
    from modsar.analyze import select_alpha

    rec = {0.0: 0.5, 0.5: 0.3, 1.0: 0.0}
    assert select_alpha(rec, {0.0: 0.80, 0.5: 0.995, 1.0: 1.0}) == 0.5  # 0.0 loses too much HR
    assert select_alpha(rec, {0.0: 0.999, 0.5: 0.999, 1.0: 1.0}) == 0.0
    assert select_alpha({0.0: 0.2, 0.5: 0.2, 1.0: 0.0}, {0.0: 1.0, 0.5: 1.0, 1.0: 1.0}) == 0.0  # ties: smallest


def test_cli_writes_table_and_plot(checkpoints, tmp_path, capsys):
    data, paths = checkpoints
    out = tmp_path / "analysis"
    assert main(["analyze", "--checkpoint", str(paths["post"]), "--diagnostic", "sparsity,rank,residual-scaling",
                 "--data-dir", str(data), "--out", str(out)]) == 0
    table = pq.read_table(out / "diagnostics.parquet").to_pandas()
    assert set(table["diagnostic"]) == {"sparsity", "rank", "residual-scaling"}
    assert (out / "residual_scaling.png").stat().st_size > 1000
    assert main(["analyze", "--checkpoint", str(paths["post"]), "--diagnostic", "nosuch",
                 "--data-dir", str(data)]) == 2
    assert "unknown diagnostic 'nosuch'" in capsys.readouterr().err
