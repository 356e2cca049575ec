"""The pure (sans-IO) transaction coordinator: see ``coordinator.TransactionCoordinator``.

``state.py`` the states and their legal moves, ``metadata.py`` one transactional id's
metadata and its prepare/complete transitions, ``records.py`` the ``__transaction_state``
records, ``coordinator.py`` the APIs' checks in Kafka's order, ``markers.py`` and
``verify.py`` the seams to the log (marker delivery, KIP-890 verification).
"""
