"""data.split=temporal: one global time cut; context strictly before every target; nothing after the
validation cut in training; refused without timestamps; recorded in rows."""

from __future__ import annotations

import numpy as np
import pytest

from modsar.config import load_config
from modsar.data.batches import TrainBatches
from modsar.data.split import TemporalSplit, cut_times, make_split
from modsar.data.store import load_dataset
from modsar.errors import ModsarError

# user 1: items 1 2 3 4 at t = 1 2 5 8; user 2: items 5 6 7 at t = 3 6 6 (a tie); user 3: items 8 9 at t = 7
# 9; user 4: item 10 at t = 4. Cuts: validation at t = 5, test at t = 7.
USER = np.array([1, 1, 1, 1, 2, 2, 2, 3, 3, 4])
ITEM = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
TIME = np.array([1, 2, 5, 8, 3, 6, 6, 7, 9, 4], dtype=float)


def split(every: bool = False) -> TemporalSplit:
    return TemporalSplit.from_timed_log(USER, ITEM, TIME, 4, 10, valid_cut=5.0, test_cut=7.0, every=every)


def history(s: TemporalSplit, user: int, end: int) -> list[int]:
    return s.items[s.starts[user] : end].tolist()


def test_first_event_after_each_cut():
    s = split()
    assert (s.train_ends - s.starts).tolist() == [2, 1, 0, 1]  # events before t = 5
    users, ends, targets = s.targets("valid")
    got = {int(u): (history(s, u, e), int(t)) for u, e, t in zip(users, ends, targets, strict=True)}
    # user 1: item 3 (t=5) after 1 2; user 2: item 6 (t=6) after 5 (item 7 shares t=6, so never its context);
    # user 3's first event (t=7) is in the test window; user 4 has nothing after the cut
    assert got == {0: ([1, 2], 3), 1: ([5], 6)}
    users, ends, targets = s.targets("test")
    got = {int(u): (history(s, u, e), int(t)) for u, e, t in zip(users, ends, targets, strict=True)}
    # user 1: item 4 (t=8) with the validation event in its history; user 3: item 8 (t=7) has no earlier
    # event, so its first test target is item 9 (t=9) after 8
    assert got == {0: ([1, 2, 3], 4), 2: ([8], 9)}
    assert s.eval_users.tolist() == [0, 1, 2]


def test_every_event_and_ties():
    s = split(every=True)
    users, ends, targets = s.targets("valid")
    pairs = sorted((int(u), history(s, u, e), int(t)) for u, e, t in zip(users, ends, targets, strict=True))
    assert pairs == [(0, [1, 2], 3), (1, [5], 6), (1, [5], 7)]  # item 7's context stops before the tie at t=6
    for which in ("valid", "test"):
        users, ends, targets = s.targets(which)
        positions = [int(np.flatnonzero(s.items == t)[0]) for t in targets]
        assert (s.timestamp[ends - 1] < s.timestamp[positions]).all()  # context strictly before every target


def test_no_event_after_the_validation_cut_is_trained_on():
    s = split()
    batches = TrainBatches(s, "ar", max_len=5, batch_size=8)
    seen = set()
    for batch in batches:
        seen |= set(batch.inputs[batch.inputs > 0].tolist()) | set(batch.labels[batch.labels > 0].tolist())
    assert seen == {1, 2}  # user 1's two training events; user 2 and 4 have one (no pair), user 3 none


def test_cuts_without_targets_and_unsorted_logs_are_refused():
    with pytest.raises(ModsarError, match="no valid target"):  # both cuts after the last event
        TemporalSplit.from_timed_log(USER, ITEM, TIME, 4, 10, valid_cut=100.0, test_cut=200.0)
    with pytest.raises(ModsarError, match="must come before the test cut"):  # quantiles that fall on one tie
        TemporalSplit.from_timed_log(USER, ITEM, TIME, 4, 10, valid_cut=6.0, test_cut=6.0)
    with pytest.raises(ModsarError, match="not in time order within each user"):
        TemporalSplit.from_timed_log(
            USER, ITEM, TIME[[1, 0, *range(2, 10)]], 4, 10, valid_cut=5.0, test_cut=7.0
        )
    with pytest.raises(
        ModsarError, match=r"data\.split_dates"
    ):  # one date with a timezone, one without: fine;
        load_config(None, ["data.split_dates=2000-11-20T00:00+02:00"])  # a single date is not two
    load_config(None, ["data.split_dates=2000-11-20T00:00+02:00,2000-12-01"])


EXAMPLE = ' (e.g. "2000-11-20,2000-12-01")'


ONE = "needs two ISO dates, the validation cut then the test cut, and has one"


@pytest.mark.parametrize(
    "given, stored, problem",
    [
        ("2000-11-20", "2000-11-20", ONE),
        ("2000-11-20T10:30", "2000-11-20T10:30", ONE),
        ("'2000-11-20,'", "2000-11-20,", ONE),
        (
            "2000-13-01,2001-01-01",
            "2000-13-01,2001-01-01",
            "needs two ISO dates, and '2000-13-01' is not one (YYYY-MM-DD or YYYY-MM-DDTHH:MM[+HH:MM])",
        ),
        (
            "2001-02-01,2000-01-01",
            "2001-02-01,2000-01-01",
            "needs the validation cut before the test cut, and 2001-02-01 is not before 2000-01-01",
        ),
    ],
    ids=["one-date", "one-datetime", "trailing-comma", "not-a-date", "out-of-order"],
)
def test_split_dates_says_which_rule_is_broken(tmp_path, capsys, given, stored, problem):
    """A single date (which YAML reads as a date, not text) is told that two are needed; before, the override
    was refused as "must be str, got datetime.date(2000, 11, 20)", and a bad date or order by one generic
    rule."""
    from modsar.cli import main

    message = f"'data.split_dates' {problem}{EXAMPLE}; got {stored!r}"
    with pytest.raises(ModsarError) as override:
        load_config(None, [f"data.split_dates={given}"])
    assert str(override.value) == f"config: {message}"
    path = tmp_path / "dates.yaml"
    path.write_text(f"data:\n  split: temporal\n  split_dates: {given}\n")
    with pytest.raises(ModsarError) as from_file:
        load_config(path)
    assert str(from_file.value) == f"{path}: {message}"
    assert (
        main(
            [
                "train",
                "--config",
                str(path),
                "--dataset",
                "synthetic",
                "--quiet",
                "--results",
                str(tmp_path / "results"),
            ]
        )
        == 2
    )
    assert capsys.readouterr().err == f"modsar: error: {path}: {message}\n"


def test_rows_record_the_cut_times_and_target_counts():
    from modsar.training.trainer import split_facts

    cfg = load_config(None, ["data.split=temporal", "data.split_valid=0.5", "data.split_test=0.75"])

    class Timed:
        name, user, item, timestamp, num_users, num_items = "t", USER, ITEM, TIME, 4, 10

    s = make_split(cfg, Timed)
    facts = split_facts(s)
    assert facts == {
        "valid_targets": len(s.targets("valid")[0]),
        "test_targets": len(s.targets("test")[0]),
        "split_valid_cut": s.valid_cut,
        "split_test_cut": s.test_cut,
    }
    assert facts["test_targets"] > 0
    assert set(split_facts(make_split(load_config(None, []), load_dataset("synthetic")))) == {
        "valid_targets",
        "test_targets",
    }


def test_config_quantiles_dates_and_refusals():
    cfg = load_config(None, ["data.split=temporal", "data.split_valid=0.5", "data.split_test=0.75"])

    class Timed:
        name, user, item, timestamp, num_users, num_items = "t", USER, ITEM, TIME, 4, 10

    s = make_split(cfg, Timed)
    assert (s.valid_cut, s.test_cut) == (float(np.quantile(TIME, 0.5)), float(np.quantile(TIME, 0.75)))
    dated = load_config(
        None, ["data.split=temporal", "data.split_dates=1970-01-01T00:00:05,1970-01-01T00:00:07"]
    )
    s = make_split(dated, Timed)
    assert (s.valid_cut, s.test_cut) == (5.0, 7.0)
    with pytest.raises(ModsarError, match=r"data\.split_dates"):
        load_config(None, ["data.split_dates=2001-02-01,2000-01-01"])
    with pytest.raises(ModsarError, match="0 < valid < test < 1"):
        load_config(None, ["data.split_valid=0.9", "data.split_test=0.8"])
    with pytest.raises(ModsarError, match=r"data\.split=temporal needs timestamps"):
        make_split(cfg, load_dataset("synthetic"))


@pytest.mark.parametrize(
    ("override", "named"),
    [("data.split=temporal", "data.split=temporal needs"), ("data.view=item", "data.view=item needs")],
)
def test_search_refuses_a_protocol_that_needs_timestamps_before_any_trial(capsys, override, named):
    """`modsar spaces --check` (the check `modsar search` runs before Ray) refuses it with one line, exit
    2."""
    from modsar.cli import main

    assert main(["spaces", "vanilla", "--check", "--dataset", "synthetic", override]) == 2
    err = capsys.readouterr().err
    assert named in err and "has none" in err and "Traceback" not in err


def test_the_space_check_sees_the_item_view_catalogue():
    """Under data.view=item the candidates are users: 1,000 sampled negatives exceed ML-100K-sized 943."""
    from modsar.config import Config
    from modsar.sweep.space_check import viewed_sizes

    sizes = {"num_items": 1682, "num_users": 943, "max_len": 50, "has_timestamp": 1}
    cfg = Config.from_dict({"data": {"view": "item"}})
    assert viewed_sizes(cfg, sizes, "x") == {**sizes, "num_items": 943, "num_users": 1682}
    assert viewed_sizes(Config(), sizes, "x") == sizes


@pytest.mark.parametrize(
    "given",
    ["[2000-11-20, 2000-12-01]", "['2000-11-20', '2000-12-01']", "[2000-11-20T00:00:00, '2000-12-01']"],
)
def test_split_dates_as_a_yaml_list_of_two_dates_means_the_same(tmp_path, given):
    """YAML reads `[2000-11-20, 2000-12-01]` as a list of two dates: the same cuts as "2000-11-20,2000-12-01"
    (before: "'data.split_dates' must be str, got [datetime.date(2000, 11, 20), ...]")."""
    text = load_config(None, ["data.split_dates=2000-11-20,2000-12-01"])
    listed = load_config(None, [f"data.split_dates={given}"])
    path = tmp_path / "dates.yaml"
    path.write_text(f"data:\n  split: temporal\n  split_dates: {given}\n")
    for cfg in (listed, load_config(path)):
        assert cut_times(cfg.data, TIME) == cut_times(text.data, TIME) == (974_678_400.0, 975_628_800.0)
    assert listed.data.split_dates.split(",")[1] == "2000-12-01"


@pytest.mark.parametrize(
    "given, problem",
    [("[]", "has none"), ("[2000-11-20]", "has one"), ("[2000-11-20, 2000-12-01, 2001-01-01]", "has 3")],
)
def test_split_dates_lists_of_other_lengths_say_two_are_needed(given, problem):
    with pytest.raises(
        ModsarError,
        match=rf"'data.split_dates' needs two ISO dates, the validation cut then the "
        rf"test cut, and {problem} \(e.g. \"2000-11-20,2000-12-01\"\); got ",
    ):
        load_config(None, [f"data.split_dates={given}"])


def test_cuts_outside_the_data_are_shown_as_dates():
    """Cut times and the data's span read as ISO dates (with the time where it is not midnight), not raw
    seconds (before: "cuts 8.74725e+08 and 9.46685e+08; the data spans 8.74725e+08 ...")."""
    base = 874_724_710.0  # 1997-09-20T03:05:10Z
    with pytest.raises(ModsarError) as late:
        TemporalSplit.from_timed_log(
            USER, ITEM, TIME + base, 4, 10, valid_cut=base + 5, test_cut=946_684_800.0
        )
    assert str(late.value) == (
        "temporal split: no test target (cuts 1997-09-20T03:05:15Z and 2000-01-01; the data spans "
        "1997-09-20T03:05:11Z to "
        "1997-09-20T03:05:19Z); move the cuts inside the data (data.split_valid / data.split_test, or "
        "data.split_dates)"
    )
    with pytest.raises(
        ModsarError,
        match=r"the validation cut \(1997-09-20T03:05:16Z\) must come before the test "
        r"cut \(1997-09-20T03:05:16Z\)",
    ):
        TemporalSplit.from_timed_log(
            USER, ITEM, TIME + base, 4, 10, valid_cut=base + 6.5, test_cut=base + 6.5
        )
