"""Stand-in for PureJaxRL's ppo.py: make_train(config) returns a function of a PRNG key, as the original's."""
import json

import jax
import jax.numpy as jnp

from wrappers import identity


def make_train(config):
    num_updates = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    with open("stand_in_config.json", "w") as f:  # what the driver passed, for the test to read
        json.dump(config, f)

    def train(rng):
        return {"metrics": identity(jnp.arange(num_updates)) + jax.random.uniform(rng)}

    return train
