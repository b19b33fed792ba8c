"""modsar analyze on trained synthetic checkpoints: exact at alpha = 1, mixing rises as alpha falls,
the +LN decomposition sums to the real layer output, attention windows obey each model's mask, HF backbones
get what they define, and the command writes its tables and plots."""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from modsar.analysis.analyze import (
    DIAGNOSTICS,
    Analysis,
    Probe,
    SwappedUsers,
    attention_stats,
    contributions,
    hits_at,
    hrli,
    mixing_ratios,
    run,
    user_token_mass,
)
from modsar.analysis.output import plot, residual_table_2
from modsar.cli import main
from modsar.config import load_config
from modsar.data.split import LeaveOneOut, history_index
from modsar.model.skips import modular_sites, residual_scale
from modsar.training.trainer import run_trial


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Briefly trained models: AR per norm placement, vanilla and local AE, and an HF LLaMA (the data root is
    shared across this module)."""
    root = tmp_path_factory.mktemp("analyze")
    common = ["train.max_epochs=6", "train.patience=0", "model.hidden_size=32", "seed=3"]
    models = {
        "pre": ["model.norm=pre", "model.num_heads=2"],
        "post": ["model.norm=post", "model.num_heads=2"],
        "ae": ["task=ae", "model.num_heads=2"],
        "local_ae": ["task=ae", "model.num_heads=1", "model.local_heads=1", "model.local_window=2"],
        "llama": ["model.backbone=llama", "model.dropout=0", "model.num_heads=2"],
        "electra": ["model.backbone=hf:electra", "model.num_heads=2"],
        "token": ["model.user_fusion=token", "model.positional=target_aligned", "model.num_heads=2"],
    }
    paths = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MODSAR_DATA", str(root / "data"))
        for name, overrides in models.items():
            paths[name] = root / f"{name}.pt"
            run_trial(
                load_config(None, common + overrides),
                checkpoint_path=paths[name],
                progress=False,
                evaluate_test=False,
            )
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
    block, site = probe.model.blocks[0], modular_sites(probe.model)[0]
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
            ln = contributions(site, x, probs, alpha)["ln"]
            z = alpha * x + attn_out
            s = torch.sqrt(z.var(-1, unbiased=False) + block.norm1.eps)[..., None]
            b_o = block.attn.proj.bias
            rebuilt = ln.sum(2) + block.norm1.weight * (b_o - b_o.mean()) / s + block.norm1.bias
            torch.testing.assert_close(rebuilt, real, rtol=0, atol=1e-5)


def test_shuffle_and_hrli_signature_on_an_ar_model(checkpoints):
    data, paths = checkpoints
    table = run(paths["pre"], ["shuffle", "hrli"], str(data)).table
    value = dict(zip(table["quantity"], table["value"], strict=True))
    assert value["ndcg@10 full"] < 0.5 * value["ndcg@10 original"]  # order matters to this model
    assert value["ndcg@10 partial"] > value["ndcg@10 full"]  # keeping the last item keeps most of it
    original = value["ndcg@10 original"]
    assert value["ndcg@10 drop full"] == pytest.approx((original - value["ndcg@10 full"]) / original)
    assert table["convention"].str.len().min() > 40  # every figure says how it was aggregated
    assert 0 <= value["hrli@1"] <= 1 and (table["n"] > 0).all()


def test_nonfinal_and_recovery_follow_their_definitions(checkpoints):
    data, paths = checkpoints
    table = run(paths["pre"], ["nonfinal", "recovery"], str(data), alphas=(0.0, 0.5, 1.0)).table
    value = {(q, a): v for q, a, v in zip(table["quantity"], table["alpha"], table["value"], strict=True)}
    assert value[("recovery rate (test)", 1.0)] == 0.0  # Rec(1) = 0 by definition
    probe = Probe(paths["pre"], str(data))
    assert value[("hr@10 at L", 1.0)] == pytest.approx(probe.metrics()["recall@10"])
    assert value[("hr@10 (test)", 1.0)] == pytest.approx(probe.metrics()["recall@10"])
    chosen = value[("alpha* (validation, epsilon=0.01)", 1.0)]
    assert chosen in (0.0, 0.5, 1.0) and value[("epsilon=0.01: alpha* validation", 1.0)] == chosen


def test_states_further_back_than_every_history_count_as_misses(checkpoints):
    """Users are evaluated in batches of similar history length, each trimmed to its longest row: a batch of
    3-item histories has no state 3 positions back. Those users are misses (not an IndexError), and a state
    that exists is still ranked."""
    data, paths = checkpoints
    probe = Probe(paths["pre"], str(data))
    n = probe.model.num_items
    users = np.repeat(np.arange(1, 41), 5)  # 40 users of 5 items: validation histories of 3
    items = (np.arange(200) * 7) % n + 1
    probe.split = LeaveOneOut.from_log(users, items, 40, n)
    assert not hits_at(probe, "valid", offset=3, k=n).any()  # k = every item: only the missing state can miss
    assert hits_at(probe, "valid", offset=2, k=n).all()


def test_residual_table_2_keeps_one_row_per_checkpoint():
    """Two SASRec checkpoints on one dataset (named apart by their files) are two Table 2 rows, not one."""

    def analysis(label: str, res: float) -> Analysis:
        table = pd.DataFrame(
            {
                "diagnostic": "mixing",
                "quantity": ["mixing_attn", "mixing_res", "mixing_ln"],
                "layer": "all",
                "alpha": 1.0,
                "value": [0.7, res, res],
                "n": 10,
            }
        )
        return Analysis(label, "toys", "ar", table)

    table = residual_table_2(
        [
            analysis("Vanilla-AR (ar-1)", 0.06),
            analysis("Vanilla-AR (ar-2)", 0.2),
            analysis("SASRec (toys)", 0.1),
        ]
    )
    assert list(table.index) == ["Vanilla-AR (ar-1, toys)", "Vanilla-AR (ar-2, toys)", "SASRec (toys)"]
    assert list(table["+Res"]) == [0.06, 0.2, 0.1]
    assert list(table["paper +Res"]) == [0.123] * 3


def test_select_alpha_rule():
    from modsar.analysis.analyze import select_alpha

    rec = {0.0: 0.5, 0.5: 0.3, 1.0: 0.0}
    assert select_alpha(rec, {0.0: 0.80, 0.5: 0.995, 1.0: 1.0}) == 0.5  # 0.0 loses too much HR
    assert select_alpha(rec, {0.0: 0.999, 0.5: 0.999, 1.0: 1.0}) == 0.0
    assert (
        select_alpha({0.0: 0.2, 0.5: 0.2, 1.0: 0.0}, {0.0: 1.0, 0.5: 1.0, 1.0: 1.0}) == 0.0
    )  # ties: smallest


def test_filtered_hrli_matches_a_hand_ranking(checkpoints):
    """With scores = item id, the probed item is top-1 after filtering iff every larger item was seen."""
    data, paths = checkpoints
    probe = Probe(paths["pre"], str(data))
    n = probe.split.num_items
    probe.final_scores = lambda inputs, sl: (
        torch.arange(1, n + 1, dtype=torch.float32).expand(len(probe.user_ids[sl]), n).clone()
    )
    result = hrli(probe, ks=(1, 10))
    rows, items = history_index(probe.split, probe.users, probe.end)
    seen = np.zeros((len(probe.users), n + 1), bool)
    seen[rows, items] = True
    last = probe.history[:, -1].numpy()
    larger_unseen = np.array([(~seen[u, last[u] + 1 :]).sum() for u in range(len(probe.users))])
    assert result["hrli@1 filtered"] == pytest.approx(np.mean(larger_unseen == 0))
    assert result["hrli@10 filtered"] == pytest.approx(np.mean(larger_unseen < 10))
    assert result["hrli@1"] == pytest.approx(np.mean(last == n))  # unfiltered: only item N is ever top-1
    assert result["hrli@1 filtered"] >= result["hrli@1"]


def test_attention_windows_obey_each_models_mask(checkpoints):
    """AR windows are lower-triangular, local-AE (w = 2) windows banded, vanilla AE uses the future too."""
    data, paths = checkpoints
    bands = {}
    for name in ("pre", "local_ae", "ae"):
        analysis = run(paths[name], ["sparsity", "rank"], str(data), attention_users=200)
        maps = analysis.maps
        assert set(maps["layer"]) == {0, 1} and len(maps) == 2 * 20 * 20 and maps["value"].max() <= 1
        offset = maps["key"] - maps["query"]
        bands[name] = (maps.loc[offset > 0, "value"].max(), maps.loc[offset.abs() > 2, "value"].max())
        spectra = analysis.spectra  # the displayed user's sorted spectrum, and the user mean beside it
        assert (np.diff(spectra.groupby("layer")["singular value"].apply(list)[0]) <= 1e-12).all()
        assert spectra["mean singular value"].notna().all()
    assert bands["pre"][0] == 0 and bands["local_ae"][1] == 0
    assert bands["ae"][0] > 0.01 and bands["local_ae"][0] > 0.01


def test_tables_2_3_are_the_means_of_the_per_user_figures(checkpoints):
    data, paths = checkpoints
    probe = Probe(paths["ae"], str(data), attention_users=150)
    stats, _ = attention_stats(probe)
    table = run(paths["ae"], ["sparsity", "rank"], str(data), attention_users=150).table
    value = {
        (q.split(" (")[0], layer): v
        for q, layer, v in zip(table["quantity"], table["layer"], table["value"], strict=True)
    }
    assert value[("S", "all")] == pytest.approx(stats["sparsity"].mean())
    assert value[("S", "1")] == pytest.approx(stats.loc[stats["layer"] == 1, "sparsity"].mean())
    assert value[("k modsar_eq8", "all")] == pytest.approx(stats["rank modsar_eq8"].mean())
    assert value[("k gd_unknown_sigma", "0")] == pytest.approx(
        stats.loc[stats["layer"] == 0, "rank gd_unknown_sigma"].mean()
    )
    assert 1 <= value[("k modsar_eq8", "all")] <= 20 and 1 / 400 <= value[("S", "all")] <= 1 / 20


def test_mixing_per_layer_and_position(checkpoints):
    data, paths = checkpoints
    probe = Probe(paths["post"], str(data))
    ratios = mixing_ratios(probe, detail=True)
    for kind in ("attn", "res", "ln"):
        # AR's first position attends only to itself (r = 0), so leaving it out raises the mean
        assert ratios[f"mixing_{kind} without position 1"] > ratios[f"mixing_{kind}"]
        for layer in (0, 1):
            for position in ("L", "L-1", "L-2"):
                assert 0 < ratios[f"mixing_{kind} layer {layer} at {position}"] < 1
    assert ratios["mixing_res"] < ratios["mixing_attn"]  # the skip adds to c_ii


def test_hf_backbone_gets_every_diagnostic(checkpoints):
    data, paths = checkpoints
    analysis = run(paths["llama"], list(DIAGNOSTICS), str(data), attention_users=100, alphas=(0.2, 1.0))
    assert set(analysis.table["diagnostic"]) == set(DIAGNOSTICS) - {"user"}  # llama has no user
    assert analysis.notes == [
        "llama Vanilla-AR: user not defined: the model has no user (model.user_fusion=none)"
    ]
    assert analysis.label == "llama Vanilla-AR" and (analysis.table["norm"] == "pre").all()
    maps = analysis.maps
    assert maps.loc[maps["key"] > maps["query"], "value"].max() == 0  # causal LLaMA
    value = {
        (q, a): v
        for q, a, v in zip(
            analysis.table["quantity"], analysis.table["alpha"], analysis.table["value"], strict=True
        )
    }
    standard = Probe(paths["llama"], str(data)).metrics()
    assert value[("ndcg@10 original", 1.0)] == pytest.approx(standard["ndcg@10"])
    assert (
        value[("ndcg@10", 1.0)] == standard["ndcg@10"] != value[("ndcg@10", 0.2)]
    )  # alpha acts through hooks
    assert value[("mixing_res", 0.2)] > value[("mixing_res", 1.0)]


def test_unknown_hf_layers_skip_what_needs_them_with_a_note(checkpoints):
    data, paths = checkpoints
    analysis = run(paths["electra"], ["hrli", "mixing", "residual-scaling"], str(data))
    assert set(analysis.table["diagnostic"]) == {"hrli"}
    assert "skipped mixing, residual-scaling" in analysis.notes[0] and "hf:electra" in analysis.notes[0]


@pytest.mark.parametrize(
    "backbone", ["llama", "hf:gpt2", "hf:bert", "albert", "transfo_xl", "transfo_xl-pre"]
)
def test_hf_contributions_rebuild_the_real_sublayer(backbone):
    """sum_j c_ij + b_O is the attention output projection's real output; post-norm: sum_j c^LN_ij + the bias
    terms is the real LayerNorm output (hooks read both off a forward pass)."""
    from hf_plugins.adapter import HFBackbone
    from modsar.config import Config

    name, norm = backbone.split("-")[0], "pre" if backbone.endswith("-pre") else "auto"
    torch.manual_seed(0)
    cfg = Config.from_dict(
        {
            "task": "ar",
            "model": {
                "backbone": name,
                "hidden_size": 16,
                "num_heads": 2,
                "dropout": 0.0,
                "attn_dropout": 0.0,
                "norm": norm,
                "activation": "relu" if name == "transfo_xl" else "gelu",
            },
        }
    )
    model = HFBackbone(cfg.model, 30, 4, 12, "ar").eval()
    sites = model.skip_sites()
    seen = {"x": [], "proj": [], "ln": []}
    hooks = [
        s.container.register_forward_pre_hook(
            lambda m, a, k: seen["x"].append(a[0] if a else k["hidden_states"]), with_kwargs=True
        )
        for s in sites
    ]
    hooks += [s.projection.register_forward_hook(lambda m, a, out: seen["proj"].append(out)) for s in sites]
    hooks += [
        s.post_norm.register_forward_hook(lambda m, a, out: seen["ln"].append(out))
        for s in sites
        if s.post_norm is not None
    ]
    with torch.no_grad():
        _, maps = model(
            torch.randint(1, 31, (3, 9), generator=torch.Generator().manual_seed(2)), need_weights=True
        )
    for hook in hooks:
        hook.remove()
    for layer, probs in enumerate(maps):
        site = sites[layer % len(sites)]
        x, proj = seen["x"][layer], seen["proj"][layer]
        x, proj = (x.transpose(0, 1), proj.transpose(0, 1)) if site.seq_first else (x, proj)
        c = contributions(site, x, probs, 1.0)
        b_o = site.b_o() if site.b_o() is not None else torch.zeros(16)
        torch.testing.assert_close(c["attn"].sum(2) + b_o, proj, rtol=0, atol=1e-5)
        assert ("ln" in c) == (site.post_norm is not None)
        if "ln" in c:
            ln, real = site.post_norm, seen["ln"][layer]
            real = real.transpose(0, 1) if site.seq_first else real
            s = torch.sqrt((c["res"].sum(2) + b_o).var(-1, unbiased=False) + ln.eps)[..., None]
            torch.testing.assert_close(
                c["ln"].sum(2) + ln.weight * (b_o - b_o.mean()) / s + ln.bias, real, rtol=0, atol=1e-5
            )


@pytest.mark.parametrize("norm", ["pre", "post", "sasrec", "normed_skip"])
def test_modular_contributions_and_scaled_skips_match_the_real_block(norm):
    """Per block style: sum_j c_ij + b_O is the real attention output; sum_j c^Res_ij adds the real skip
    (x, or SASRec's normed query); c^LN rebuilds the real LayerNorm after the sum; and under scaled_skips the
    block really computes alpha * skip + Attn before that LayerNorm."""
    from modsar.analysis.analyze import contributions
    from modsar.config import ModelConfig
    from modsar.model.modular import ModularSAR
    from modsar.model.skips import scaled_skips

    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=16, num_heads=2, dropout=0.0, attn_dropout=0.0, norm=norm)
    model = ModularSAR(cfg, 30, 4, 12, "ar").eval()
    sites = modular_sites(model)
    inputs = torch.randint(1, 31, (3, 9), generator=torch.Generator().manual_seed(2))
    inputs[1, :3] = 0
    seen: dict[str, list] = {"x": [], "proj": [], "ln": []}
    for alpha in (1.0, 0.3):
        for captured in seen.values():
            captured.clear()
        with torch.no_grad(), scaled_skips(sites, alpha):  # hooks after its own: they see the scaled output
            hooks = [
                s.container.register_forward_pre_hook(lambda m, a: seen["x"].append(a[0])) for s in sites
            ]
            hooks += [
                s.projection.register_forward_hook(lambda m, a, out: seen["proj"].append(out)) for s in sites
            ]
            hooks += [
                s.post_norm.register_forward_pre_hook(lambda m, a: seen["ln"].append(a[0]))
                for s in sites
                if s.post_norm is not None
            ]
            _, maps = model(inputs, need_weights=True)
            for hook in hooks:
                hook.remove()
        for layer, (site, probs) in enumerate(zip(sites, maps, strict=True)):
            x, block = seen["x"][layer], model.blocks[layer]
            c = contributions(site, x, probs, alpha)
            skip = block.norm1(x) if norm in ("sasrec", "normed_skip") else x
            b_o = site.b_o()
            attn_out = c["attn"].sum(2) + b_o
            torch.testing.assert_close(attn_out - (1 - alpha) * skip, seen["proj"][layer], rtol=0, atol=1e-5)
            torch.testing.assert_close(c["res"].sum(2), alpha * skip + c["attn"].sum(2), rtol=0, atol=1e-5)
            assert ("ln" in c) == (norm != "pre")
            if norm != "pre":  # the LayerNorm's real input is alpha * skip + Attn(x)
                torch.testing.assert_close(seen["ln"][layer], c["res"].sum(2) + b_o, rtol=0, atol=1e-5)
                ln = site.post_norm
                z = c["res"].sum(2) + b_o
                s = torch.sqrt(z.var(-1, unbiased=False) + ln.eps)[..., None]
                torch.testing.assert_close(
                    c["ln"].sum(2) + ln.weight * (b_o - b_o.mean()) / s + ln.bias, ln(z), rtol=0, atol=1e-5
                )


def test_cli_writes_table_and_plot(checkpoints, tmp_path, capsys):
    data, paths = checkpoints
    out = tmp_path / "analysis"
    assert (
        main(
            [
                "analyze",
                "--checkpoint",
                str(paths["post"]),
                "--diagnostic",
                "sparsity,rank,residual-scaling",
                "--data-dir",
                str(data),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    table = pq.read_table(out / "diagnostics.parquet").to_pandas()
    assert set(table["diagnostic"]) == {"sparsity", "rank", "residual-scaling"}
    assert (out / "residual_scaling.png").stat().st_size > 1000
    assert (
        main(
            ["analyze", "--checkpoint", str(paths["post"]), "--diagnostic", "nosuch", "--data-dir", str(data)]
        )
        == 2
    )
    assert "unknown diagnostic 'nosuch'" in capsys.readouterr().err
    garbage = tmp_path / "notes.pt"
    garbage.write_text("not a checkpoint")
    assert main(["analyze", "--checkpoint", str(garbage), "--data-dir", str(data)]) == 2
    assert "not a ModSAR checkpoint" in capsys.readouterr().err


def test_cli_compares_ae_local_ae_and_ar_side_by_side(checkpoints, tmp_path, capsys):
    data, paths = checkpoints
    out = tmp_path / "tables"
    assert (
        main(
            [
                "analyze",
                "--checkpoint",
                str(paths["ae"]),
                "--checkpoint",
                str(paths["local_ae"]),
                "--checkpoint",
                str(paths["pre"]),
                "--diagnostic",
                "sparsity,rank,hrli",
                "--users",
                "100",
                "--data-dir",
                str(data),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "ModSAR Tables 2-3" in printed
    lines = [
        line.split()[0]
        for line in printed.splitlines()
        if line.split()[:1] in (["Vanilla-AE"], ["Local-AE"], ["Vanilla-AR"])
    ]
    assert lines[:3] == ["Vanilla-AE", "Local-AE", "Vanilla-AR"]
    for name in ("attention_heatmaps.png", "singular_values.png"):
        assert (out / name).stat().st_size > 5000
    maps = pq.read_table(out / "attention_maps.parquet").to_pandas()
    assert set(maps["model"]) == {"Vanilla-AE", "Local-AE", "Vanilla-AR"} and maps["user"].nunique() == 1
    table = pq.read_table(out / "diagnostics.parquet").to_pandas()
    assert set(table["model"]) == {"Vanilla-AE", "Local-AE", "Vanilla-AR"}


def test_cli_reads_the_selected_checkpoints_of_an_experiment(checkpoints, tmp_path, capsys):
    from modsar.records.rows import result_row, write_row

    data, paths = checkpoints
    results = tmp_path / "results"
    for task, name in (("ar", "pre"), ("ae", "ae")):
        cfg = load_config(None, [f"task={task}"])
        row = result_row(
            cfg,
            experiment="exp",
            trial_id=task,
            status="finished",
            space="vanilla",
            facts={"checkpoint": str(paths[name])},
        )
        write_row(str(results), row | {"selected": True})
    assert (
        main(
            [
                "analyze",
                "--experiment",
                "exp",
                "--results",
                str(results),
                "--diagnostic",
                "sparsity,hrli",
                "--users",
                "50",
                "--data-dir",
                str(data),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert printed.index("Vanilla-AE") < printed.index("Vanilla-AR") and "HRLI@1" in printed
    assert (
        main(["analyze", "--experiment", "nothing", "--results", str(results), "--data-dir", str(data)]) == 2
    )
    assert "no selected trials" in capsys.readouterr().err


def test_cli_takes_the_best_validation_checkpoint_of_a_train_experiment(checkpoints, tmp_path):
    from modsar.records.rows import result_row, write_row

    data, paths = checkpoints
    results = tmp_path / "results"
    for trial, name, score in (("a", "pre", 0.30), ("b", "post", 0.35), ("c", "ae", 0.10)):
        cfg = load_config(None, [f"task={'ae' if name == 'ae' else 'ar'}"])
        write_row(
            str(results),
            result_row(
                cfg,
                experiment="trained",
                trial_id=trial,
                status="finished",
                valid={"ndcg@10": score},
                facts={"checkpoint": str(paths[name])},
            ),
        )
    out = tmp_path / "out"
    assert (
        main(
            [
                "analyze",
                "--experiment",
                "trained",
                "--results",
                str(results),
                "--diagnostic",
                "hrli",
                "--data-dir",
                str(data),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    table = pq.read_table(out / "diagnostics.parquet").to_pandas()
    assert set(table["checkpoint"]) == {str(paths["post"]), str(paths["ae"])}  # the better AR, the only AE


def test_user_diagnostic_swaps_every_user_and_weighs_the_token(checkpoints):
    data, paths = checkpoints
    probe = Probe(paths["token"], str(data))
    swap = SwappedUsers(probe)
    ids = probe.user_ids
    assert (swap.other[ids] != ids).all() and sorted(swap.other[ids].tolist()) == sorted(ids.tolist())
    analysis = run(paths["token"], ["user", "mixing"], str(data))
    rows = analysis.table.set_index(["quantity", "layer"])["value"]
    assert rows[("ndcg@10 own user", "all")] == probe.metrics()["ndcg@10"]
    assert rows[("ndcg@10 swapped users", "all")] == probe.evaluate(swap)["ndcg@10"]
    assert 0 < rows[("attention mass on the user token", "all")] < 1
    with torch.no_grad():  # uniform attention: query t of a row sees the token and t + 1 items -> 1 / (t + 2)
        for block in probe.model.blocks:
            block.attn.qkv.weight.zero_()
            block.attn.qkv.bias.zero_()
            block.attn.rel_keys.weight.zero_()
    lengths = (probe.inputs > 0).sum(1)
    expected = torch.cat([1.0 / torch.arange(2, n + 2) for n in lengths.tolist()]).mean()
    assert user_token_mass(probe)["all"] == pytest.approx(float(expected), rel=1e-5)


def test_user_diagnostic_is_not_defined_without_a_user(checkpoints):
    data, paths = checkpoints
    analysis = run(paths["post"], ["user", "hrli"], str(data))
    assert "user" not in set(analysis.table["diagnostic"]) and "hrli" in set(analysis.table["diagnostic"])
    assert any("user not defined" in note for note in analysis.notes)


def test_figure_2_puts_five_datasets_on_a_three_by_two_grid(tmp_path):
    """One HRLI@1 / HRL2I@1 panel per dataset, three to a row: the paper's five datasets make two rows (the
    sixth cell empty), not a strip five panels wide."""

    def analysis(model: str, dataset: str) -> Analysis:
        table = pd.DataFrame(
            {
                "diagnostic": "hrli",
                "quantity": ["hrli@1", "hrl2i@1"],
                "layer": "all",
                "alpha": 1.0,
                "value": [0.9, 0.01],
                "n": 100,
            }
        )
        return Analysis(label=f"{model} ({dataset})", dataset=dataset, task="ar", table=table)

    datasets = ["beauty", "sports", "toys", "video", "diginetica"]
    plot([analysis(m, d) for d in datasets for m in ("SASRec", "GRU4Rec")], tmp_path)
    with open(tmp_path / "last_item_reliance.png", "rb") as png:
        width, height = struct.unpack(">II", png.read(24)[16:24])  # the IHDR chunk
    assert height == round(2 * 3.4 * 120)  # two rows of 3.4 inches at 120 dpi
    assert width == round(3 * 4.2 * 120)  # three panels of max(4, 1.1 * 2 models + 2) = 4.2 inches


def test_a_window_past_the_maps_and_cutoffs_without_10_are_handled(
    checkpoints, tmp_path, capsys, monkeypatch
):
    """--window beyond the model's positions would build W x W matrices of zeros (1e6 asked for 7 TiB):
    refused in one line. A model trained without 10 in eval.ks still gets the diagnostics' @10 metrics."""
    data, paths = checkpoints
    assert (
        main(
            [
                "analyze",
                "--checkpoint",
                str(paths["post"]),
                "--diagnostic",
                "sparsity",
                "--window",
                "1000000",
                "--data-dir",
                str(data),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1 and "--window 1000000 is longer than" in err[0] and "use --window 30 or less" in err[0]
    )
    monkeypatch.setenv("MODSAR_DATA", str(data))
    five = tmp_path / "five.pt"
    run_trial(
        load_config(
            None, ["train.max_epochs=1", "model.hidden_size=16", "eval.ks=[5]", "train.monitor=ndcg@5"]
        ),
        checkpoint_path=five,
        progress=False,
        evaluate_test=False,
    )
    table = run(five, ["shuffle"], str(data)).table
    original = table[table["quantity"] == "ndcg@10 original"]["value"].item()
    assert original == Probe(five, str(data)).metrics()["ndcg@10"] > 0


def test_hrli_on_a_catalogue_under_ten_items(tmp_path, isolated_data_root):
    """HRLI@10 on 4 items (topk(10) raised "selected index k out of range"): the whole ranking is the top 10,
    so every probe is a hit; every diagnostic runs."""
    from modsar.data.store import prepare_dataset

    src = tmp_path / "four.txt"
    src.write_text("".join(f"{u} {(u + j) % 4 + 1}\n" for u in range(1, 9) for j in range(6)))
    prepare_dataset("four", [src])
    ckpt = tmp_path / "four.pt"
    run_trial(
        load_config(None, ["dataset=four", "train.max_epochs=1", "model.hidden_size=8", "model.num_heads=1"]),
        checkpoint_path=ckpt,
        progress=False,
        evaluate_test=False,
    )
    result = hrli(Probe(ckpt, str(isolated_data_root)))
    assert result["hrli@10"] == result["hrl2i@10"] == result["hrli@10 filtered"] == 1.0
    assert 0.0 <= result["hrli@1"] <= 1.0
    table = run(ckpt, list(DIAGNOSTICS), str(isolated_data_root)).table
    hr10 = table[table["quantity"] == "hrli@10"]["value"]
    assert len(hr10) == 1 and hr10.item() == 1.0
