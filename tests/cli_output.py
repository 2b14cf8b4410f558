"""Running the command line in-process and reading its one-line errors (shared by the CLI tests)."""

from __future__ import annotations

from planopt import cli


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `planopt ARGV`."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, prefix: str = "planopt: error: ") -> str:
    """stderr must be exactly one line starting with `prefix`, never a traceback."""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(prefix)
    return lines[0]
