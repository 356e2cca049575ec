"""The operator commands of ``kgc``, one module per command family.

How this works: each module has the ``cmd_*`` functions that run its subcommands and an
``add_commands(sub, common)`` that registers them on the ``kgc`` parser (``coordinator.cli``),
each subcommand with the options every operator command shares (``common``). Every
command speaks the plain Kafka protocol through ``tools.admin`` and returns an exit code.
"""
