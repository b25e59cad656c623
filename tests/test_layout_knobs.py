"""Each layout knob is declared once, as a field of Layout (specs.knobs): KNOBS reads them back,
and the plan schema's LayoutSection, the Candidates columns, the CLI layout options and the
Layout's own schema all follow that table."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.evaluation.candidates import COLUMNS, Candidates, default_code, encode
from planner.specs.plan import LayoutSection
from planner.specs.knobs import KNOB, KNOBS, Layout
from planner.specs.records import dump, json_schema

from conftest import run_dtplan


def test_every_home_lists_the_knobs_in_table_order():
    names = [k.name for k in KNOBS]
    assert [f.name for f in dataclasses.fields(Layout)] == names
    assert list(LayoutSection.model_fields) == names
    assert [LayoutSection.model_fields[n].annotation for n in names] == \
        [k.field(plan=True)[0] for k in KNOBS]
    assert [f.name for f in dataclasses.fields(Candidates)] == [k.column for k in KNOBS if k.column]


def test_plan_section_makes_only_the_derived_knobs_optional():
    section = LayoutSection()
    for k in KNOBS:
        assert getattr(section, k.name) == (None if k.plan_optional else k.default), k.name


def test_schema_carries_help_unit_and_range():
    # the plan's section, and the Layout itself (pydantic reads its fields' metadata)
    for props in (LayoutSection.model_json_schema()["properties"],
                  json_schema(Layout)["properties"]):
        assert props["tp"]["description"] == "tensor parallel [GPUs]"
        assert props["tp"]["minimum"] == 1 and props["tp"]["maximum"] == KNOB["tp"].le
        assert props["zero"]["maximum"] == 3
        assert props["schedule"]["enum"] == list(KNOB["schedule"].choices)


def test_cli_offers_each_knob_once():
    out = run_dtplan("estimate", "--help").out
    for k in KNOBS:
        assert (k.flag in out) == k.cli, k.name
    assert "--dp " not in out


def test_cli_knob_values_reach_the_layout():
    r = run_dtplan("estimate", "--model", "llama3-8b", "--gpus", "16", "--tp", "2", "--pp", "2",
                   "--zero", "1", "--schedule", "interleaved", "--chunks", "2",
                   "--recompute", "full", "--recompute-layers", "3", "--format", "json")
    assert r.code in (0, 1), r
    lay = r.json()["layout"]
    assert (lay["tp"], lay["pp"], lay["dp"], lay["zero"]) == (2, 2, 4, 1)
    assert (lay["schedule"], lay["chunks"], lay["recompute_layers"]) == ("interleaved", 2, 3)


def _layouts():
    ints = st.integers(1, 64)
    return st.builds(
        Layout, tp=ints, pp=ints, dp=ints, cp=ints, ep=ints, zero=st.integers(0, 3),
        shard_group=st.none() | ints, micro_batch=ints, chunks=ints,
        schedule=st.sampled_from(KNOB["schedule"].choices),
        sp=st.none() | st.booleans(), recompute=st.sampled_from(KNOB["recompute"].choices),
        recompute_layers=st.none() | st.integers(0, 16),
        offload_optimizer=st.sampled_from(KNOB["offload_optimizer"].choices),
        offload_params=st.sampled_from(KNOB["offload_params"].choices))


@settings(max_examples=60, deadline=None)
@given(st.lists(_layouts(), min_size=1, max_size=4))
def test_candidates_round_trip_every_column(layouts):
    c = Candidates.from_layouts(layouts)
    assert len(c) == len(layouts)
    for i, lay in enumerate(layouts):
        back = c.layout(i, lay.precision, lay.optimizer)
        # sp travels as the effective sequence-parallel flag (the column the engine reads)
        assert dump(back) == {**dump(lay), "sp": lay.sequence_parallel}
        assert all(int(getattr(c, k.column)[i]) == encode(k, lay) for k in COLUMNS)


def test_a_column_not_given_holds_the_knob_default():
    import numpy as np
    given = {"tp": np.array([2, 4]), "pp": np.array([1, 1]), "dp": np.array([4, 2]),
             "sp": np.array([1, 1])}
    c = Candidates.of(**given)
    assert c.layout(1, "mixed", "adam") == Layout(tp=4, dp=2, sp=True)
    assert all(int(getattr(c, k.column)[0]) == default_code(k) for k in COLUMNS
               if k.column not in given)
