"""The ``tfinput`` command: one registry of subcommands and one `main` that runs them.

Every subcommand is a `tfinput._src.applications.cli.registry.Command` (its name, help,
arguments and run); `tfinput._src.applications.cli.registry.COMMANDS` lists them all, in
the order ``tfinput --help`` shows them. `registry.main` owns the exit codes (0 ok, 1 the
data or the trace has problems, 2 bad usage or input, 130 interrupted, 141 stdout closed
by its reader) and prints errors as one line on stderr.

Modules of this package shared by the commands of `tfinput`, `tuners` and `profiles`:
`args` (argument groups, arguments to pipeline, the built-in demo data set) and
`console` (the rich console, the progress bar, TensorFlow's log lines kept out of the
output); `commands/` holds tfinput's own commands, one module per family.
"""
