"""Stand-in for PureJaxRL's ppo_continuous_action.py: make_train(config) as the stand-in ppo.py's (its metrics shaped
as the original's traj_batch.info), from a module that imports its wrappers the same way."""
import json

import jax
import jax.numpy as jnp

from wrappers import identity


def make_train(config):
    num_updates = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    with open("stand_in_config.json", "w") as f:  # what the driver passed, for the test to read
        json.dump(config, f)

    def train(rng):
        shape = (num_updates, config["NUM_STEPS"], config["NUM_ENVS"])
        count = jnp.arange(num_updates * config["NUM_STEPS"] * config["NUM_ENVS"]).reshape(shape)
        returns = identity(count.astype(jnp.float32)) + jax.random.uniform(rng)
        return {"metrics": {"returned_episode": count % 5 == 1, "returned_episode_returns": returns}}

    return train
