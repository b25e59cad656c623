"""One check, named as the person gave the value: a library call's error names the function's
own parameter in its own unit (a notebook user never typed a flag); the same bad value through
the CLI names the option, in the option's unit (planner.errors naming, planner.cli.names)."""

import pytest

from planner.errors import InputError, Name, naming, renamed
from planner.evaluation.train import build_layout
from planner.io import validate as v
from planner.resilience.planning import failure_rate, interval_optimum
from planner.specs.layout import plan_layout


def _field_and_message(call) -> tuple[str, str]:
    with pytest.raises(InputError) as e:
        call()
    return e.value.field, e.value.message


CASES = [
    # (library call, its field and message; the CLI's arguments, its line)
    (lambda: build_layout(gpus=0), "gpus", "must be greater than 0, got 0",
     ("fit", "--model", "llama3-8b", "--gpus", "0"), "--gpus: must be greater than 0, got 0"),
    (lambda: plan_layout(100, 8, tp=8), "gpus", "100 is not divisible by TP×PP×CP = 8",
     ("layout", "--gpus", "100", "--tp", "8"), "--gpus: 100 is not divisible by TP×PP×CP = 8"),
    # another name and unit: the library's seconds, the CLI's minutes
    (lambda: interval_optimum(1e300, 36000), "cost_s",
     "must be between 1e-09 and 1e+15, got 1e+300",
     ("checkpoint", "--cost-min", "1e300", "--mtbf-hours", "10"),
     "--cost-min: must be between 1.66667e-11 and 1.66667e+13, got 1e+300"),
    (lambda: interval_optimum(180, 36000, restart_s=-60), "restart_s",
     "must be a finite number of at least 0, got -60",
     ("checkpoint", "--cost-min", "3", "--mtbf-hours", "10", "--restart-min", "-1"),
     "--restart-min: must be a finite number of at least 0, got -1"),
]


@pytest.mark.parametrize("call,field,message,args,line", CASES)
def test_library_names_its_parameter_cli_its_option(dtplan, call, field, message, args, line):
    assert _field_and_message(call) == (field, message)
    r = dtplan(*args)
    assert r.code == 2 and r.err == f"dtplan: error: {line}\n", r


def test_a_message_naming_other_inputs_names_them_the_same_way():
    field, message = _field_and_message(lambda: failure_rate(gpus=8, gpu_mtbf_s=1, job_mtbf_s=1))
    assert field == "job_mtbf_s"
    assert message == ("give exactly one of gpu_mtbf_s, node_mtbf_s, job_mtbf_s or "
                       "interruptions with period_s")


def test_naming_and_renamed_nest_and_restore():
    hours = {"mtbf_s": Name("--mtbf-hours", 3600.0)}
    with naming(lambda p: hours.get(p, Name(p))):
        with pytest.raises(InputError) as e:
            v.duration("mtbf_s", 1e300)
        assert e.value.field == "--mtbf-hours" and "got 2.77778e+296" in e.value.message
        with renamed(seconds="mtbf_s"):
            with pytest.raises(InputError) as e:
                v.positive("seconds", 0)
            assert e.value.field == "--mtbf-hours"
    with pytest.raises(InputError) as e:
        v.positive("mtbf_s", 0)
    assert e.value.field == "mtbf_s"   # outside the block: the parameter's own name again
