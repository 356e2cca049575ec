"""A Jepsen-style harness: operation histories, their checkers and a fault-injecting proxy."""
