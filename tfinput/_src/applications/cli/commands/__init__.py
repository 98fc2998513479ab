"""The subcommands of ``tfinput`` that need only `tfinput`: one module per command
(``tune``/``demo`` live in `tuners._cli`, ``profile``/``inspect`` in `profiles._cli`)."""
