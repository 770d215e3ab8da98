"""agents_env.py - the environment of tools/bench/agents.py (served by tools/env_server.py
--env-class Lookup): one tool, lookup(key), that sleeps $DFG_BENCH_TOOL_SLEEP seconds (default 0)
before it answers, as a tool that waits on a service would; get_reward scores an episode by its
calls, so the advantages are not all zero."""
import os
import time

SLEEP = float(os.environ.get("DFG_BENCH_TOOL_SLEEP", "0"))


class Lookup:
    def __init__(self):
        self.calls = 0

    def reset(self, **row):
        self.calls = 0
        return None  # the prompt as it is

    def lookup(self, key: int) -> str:
        """Looks a key up in the service's table.

        Args:
            key: the key

        Returns:
            the value stored under the key
        """
        self.calls += 1
        if SLEEP > 0:
            time.sleep(SLEEP)
        return f"value {key * 37 % 101}"

    def get_reward(self) -> float:
        return min(self.calls, 4) / 4.0
