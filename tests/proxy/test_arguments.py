"""The command line's numbers: a bad one stops at its option, before anything starts."""

from __future__ import annotations

import pytest

from proxy.cli import main, parser


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["serve", "--port", "70000"], "argument --port: 70000 is not a port (1 to 65535)"),
        (["serve", "--port", "0"], "argument --port: 0 is not a port (1 to 65535)"),
        (["serve", "--port", "-1"], "argument --port: -1 is not a port (1 to 65535)"),
        (["serve", "--port", "http"], "argument --port: 'http' is not a whole number"),
        (["serve", "--workers", "0"], "argument --workers: 0 is not above 0"),
        (["serve", "--workers", "-2"], "argument --workers: -2 is not above 0"),
        (["run", "--port", "65536", "--", "true"], "argument --port: 65536 is not a port"),
    ],
)
def test_a_bad_number_is_a_usage_error_naming_its_option(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port outside 1 to 65535 (uvicorn bound 70000 as 4464 and logged 70000) or a worker
    count below 1 is argparse's error, status 2, naming the option and the value."""
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


def test_good_numbers_are_taken() -> None:
    """The ends of the port range and one worker parse as given."""
    args = parser().parse_args(["serve", "--port", "65535", "--workers", "1"])
    assert (args.port, args.workers) == (65535, 1)
    assert parser().parse_args(["serve", "--port", "1"]).port == 1
