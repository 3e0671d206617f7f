"""The command table in `cli/main.py`: lazy, complete, and in step with the modules."""

from __future__ import annotations

import argparse
import importlib
import shutil
import subprocess
import sys

import pytest

from contrast.cli.main import COMMANDS, build_parser, main, terminal_columns

# What the heavy commands pull in; none of it may load before a command that needs it runs.
HEAVY = ("grpc", "pydantic", "contrast.coordinator", "regorus", "ruamel", "contrast.generate")


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    return set(result.stdout.split())


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_the_cli_loads_no_command_until_one_runs() -> None:
    loaded = _loaded_after("import contrast.cli.main as m\nm.build_parser(['--help'])")
    assert _heavy(loaded) == []
    assert not any(name.startswith("contrast.cli.") and name != "contrast.cli.main"
                   for name in loaded)  # fmt: skip


def test_evidence_verify_loads_neither_grpc_nor_the_coordinator() -> None:
    loaded = _loaded_after("import contrast.cli.main as m\nm.build_parser(['evidence', 'verify'])")
    assert "contrast.cli.evidence" in loaded
    assert _heavy(loaded) == []


def _registered(module: str) -> dict[str, str]:
    """The commands `module` registers, with their help."""
    commands = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(f"contrast.cli.{module}").register(commands)
    return {action.dest: str(action.help) for action in commands._choices_actions}


@pytest.mark.parametrize("module", sorted({command.module for command in COMMANDS.values()}))
def test_the_table_names_each_module_s_commands_with_their_help(module: str) -> None:
    expected = {
        name: command.help for name, command in COMMANDS.items() if command.module == module
    }
    assert _registered(module) == expected


def test_help_lists_every_command_in_the_table_s_order(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    positions = [out.index(f"\n    {name}") for name in COMMANDS]
    assert positions == sorted(positions)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_parses_its_own_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: contrast {name}")


def test_the_full_parser_has_every_command() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(subparsers.choices) == list(COMMANDS)


def test_an_unknown_command_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nope'" in err
    assert "node-installer" in err


def _commands(parser: argparse.ArgumentParser) -> list[str]:
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(subparsers.choices)


@pytest.mark.parametrize(
    "argv", [["evidence", "verify", "x"], ["--debug", "evidence"], ["evidence", "--help"]]
)
def test_a_command_s_parser_is_made_alone(argv: list[str]) -> None:
    # Nothing these can print lists the other commands; making their parsers cost evidence
    # verify more than its own.
    assert _commands(build_parser(argv)) == ["evidence"]


@pytest.mark.parametrize(
    "argv",
    [["--help", "evidence"], ["--he", "evidence"], ["-h", "evidence"], ["--version", "evidence"],
     ["nope"], [], ["--debug"], ["--", "evidence"]],
)  # fmt: skip
def test_whatever_may_list_the_commands_has_them_all(argv: list[str]) -> None:
    assert sorted(_commands(build_parser(argv))) == sorted(COMMANDS)


def test_help_before_a_command_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help", "evidence", "verify"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: contrast [-h]")
    assert all(f"\n    {name}" in out for name in COMMANDS)


def test_an_option_after_a_lone_command_is_refused_as_before(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--debug", "evidence", "verify", "x", "--nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "usage: contrast [-h] [--version] [--debug] COMMAND ...",
        "contrast: error: unrecognized arguments: --nope",
    ]


def test_only_commands_that_log_load_logging() -> None:
    assert [name for name, command in COMMANDS.items() if not command.logs] == ["evidence"]
    loaded = _loaded_after("import contrast.cli.main as m\nm.main(['evidence', 'verify', 'x'])")
    assert "logging" not in loaded


@pytest.mark.parametrize("columns", [None, "100", "45", "0", "-3", "wide", ""])
def test_the_terminal_is_as_wide_as_shutil_says(
    columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert terminal_columns() == shutil.get_terminal_size().columns


@pytest.mark.parametrize("columns", ["100", "60"])
@pytest.mark.parametrize("argv", [[], ["evidence"], ["evidence", "verify"]])
def test_help_is_formatted_as_argparse_formats_it(
    argv: list[str], columns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", columns)
    parser = build_parser(argv or None)
    for name in argv:
        parser = next(
            action.choices[name]
            for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
        )
    ours = parser.format_help()
    parser.formatter_class = argparse.HelpFormatter
    assert ours == parser.format_help()


def test_evidence_verify_loads_no_shutil() -> None:
    loaded = _loaded_after("import contrast.cli.main as m\nm.main(['evidence', 'verify', 'x'])")
    assert "shutil" not in loaded
