"""`dtplan completion bash|zsh|fish`: print the shell's completion script.

Install: ``dtplan completion bash > ~/.local/share/bash-completion/completions/dtplan`` (bash),
``dtplan completion zsh > "${fpath[1]}/_dtplan"`` (zsh),
``dtplan completion fish > ~/.config/fish/completions/dtplan.fish`` (fish). The script calls
dtplan back with ``_DTPLAN_COMPLETE`` set; `planner.cli.run` then answers with candidates.
"""

from __future__ import annotations

from enum import Enum

import typer

from planner.cli import COMPLETE_VAR, EXIT_OK, app



class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def enable_completion() -> None:
    """Register typer's shell classes (dtplan is built with add_completion=False, which keeps
    --install-completion out of every help screen)."""
    from typer._completion_classes import completion_init
    completion_init()


@app.command("completion")
def completion_cmd(shell: Shell = typer.Argument(..., metavar="SHELL", help="bash, zsh or fish")) -> int:
    """Print the completion script for bash, zsh or fish (redirect it where your shell loads
    completions, e.g. `dtplan completion bash > ~/.local/share/bash-completion/completions/dtplan`)."""
    from typer._completion_shared import get_completion_script

    from planner.io.stdout import write_stdout
    write_stdout(get_completion_script(prog_name="dtplan", complete_var=COMPLETE_VAR,
                                       shell=shell.value) + "\n")
    return EXIT_OK
