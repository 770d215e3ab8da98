"""guess.py - a guessing game as a TRL environment class (environment_factory), for
tools/env_server.py --env-class GuessingGame (docs/agents.md, "An environment with a Hugging Face
model").

Each episode the environment picks a number from 1 to 100 (from the dataset row's "seed", so a
group of generations plays the same number); the policy calls guess(n) and reads "higher",
"lower" or "right"; get_reward scores the episode: 1 when it found the number, less for each
guess it needed, 0 when it never found it.
"""
import random


class GuessingGame:
    def __init__(self):
        self.target, self.guesses, self.found = 0, 0, False

    def reset(self, **row):
        self.target = random.Random(row.get("seed", 0)).randint(1, 100)
        self.guesses, self.found = 0, False
        return " I picked a number from 1 to 100."

    def guess(self, n: int) -> str:
        """Guesses the number.

        Args:
            n: the guess, from 1 to 100

        Returns:
            higher, lower or right
        """
        self.guesses += 1
        if n == self.target:
            self.found = True
            return "right"
        return "higher" if n < self.target else "lower"

    def get_reward(self) -> float:
        return 1.0 / self.guesses if self.found else 0.0
