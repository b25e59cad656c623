"""`dtplan completion bash|zsh|fish`: print the shell's completion script.

Install: ``dtplan completion bash > ~/.local/share/bash-completion/completions/dtplan`` (bash),
``dtplan completion zsh > "${fpath[1]}/_dtplan"`` (zsh),
``dtplan completion fish > ~/.config/fish/completions/dtplan.fish`` (fish). The script calls
dtplan back with ``_DTPLAN_COMPLETE`` set; `planner.cli.dispatch.run` then answers with candidates.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer
from typer._completion_shared import get_completion_script

from planner.cli.root import COMPLETE_VAR, EXIT_OK, command
from planner.io.stdout import write_stdout


class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


@command("completion", "dtplan completion bash > ~/.local/share/bash-completion/completions/dtplan",
         "dtplan completion zsh > \"${fpath[1]}/_dtplan\"")
def completion_cmd(shell: Annotated[Shell, typer.Argument(metavar="SHELL",
                                                          help="bash, zsh or fish")]) -> int:
    """Print the completion script for bash, zsh or fish (redirect it where your shell loads
    completions, e.g. `dtplan completion bash > ~/.local/share/bash-completion/completions/dtplan`)."""
    write_stdout(get_completion_script(prog_name="dtplan", complete_var=COMPLETE_VAR,
                                       shell=shell.value) + "\n")
    return EXIT_OK
