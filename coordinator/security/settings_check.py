"""The settings whose syntax the security layer owns, checked before the server starts.

How this works: ``coordinator.config`` keeps ``super.users`` and each listener's
``ssl.principal.mapping.rules`` as strings (it knows nothing of principals). ``check_settings``
parses them with the parsers that later use them (``parse_super_users``,
``SslPrincipalMapper``) and fails with the one line ``config.load`` gives for any other
invalid setting (a ``SystemExit`` carrying it). ``kgc serve`` calls it right after loading the
settings, before anything is opened, so a bad value stops start-up as any other does.
"""

from __future__ import annotations

from coordinator.config import Settings
from coordinator.security.acl import parse_super_users
from coordinator.security.principal_mapping import SslPrincipalMapper


def check_settings(s: Settings) -> None:
    """Raise ``SystemExit`` with one line naming the setting if a security value is invalid."""
    try:
        parse_super_users(s.super_users)
    except ValueError as exc:
        # The same line a field validator's error gives in config.load.
        raise SystemExit(
            f"invalid setting super.users: Value error, {exc} (got {s.super_users!r})"
        ) from None
    for spec in s.listener_specs:
        rules = s.listener_config(spec.name, "ssl.principal.mapping.rules")
        try:
            SslPrincipalMapper(str(rules))
        except ValueError as exc:
            name = s.listener_setting_name(spec.name, "ssl.principal.mapping.rules")
            raise SystemExit(f"invalid configuration: {name}: {exc}") from None
