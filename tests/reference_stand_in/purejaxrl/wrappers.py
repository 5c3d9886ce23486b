"""Stand-in for PureJaxRL's wrappers.py: its top imports brax and navix, which are not installed."""
import jax
from brax import envs
from brax.envs.wrappers.training import EpisodeWrapper, AutoResetWrapper
import navix as nx


def identity(x):
    return jax.numpy.asarray(x)


def stand_in_train(config, period, phase):
    """The stand-in scripts' make_train: writes the config it was given (for the test to read) and returns a function
    of a PRNG key whose metrics are shaped as PureJaxRL's traj_batch.info (iterations x steps x envs), with known
    numbers: an episode ends where the running index % period == phase, its return that index plus the key's draw."""
    import json

    import jax.numpy as jnp

    num_updates = config["TOTAL_TIMESTEPS"] // config["NUM_STEPS"] // config["NUM_ENVS"]
    with open("stand_in_config.json", "w") as f:
        json.dump(config, f)

    def train(rng):
        shape = (num_updates, config["NUM_STEPS"], config["NUM_ENVS"])
        count = jnp.arange(num_updates * config["NUM_STEPS"] * config["NUM_ENVS"]).reshape(shape)
        returns = identity(count.astype(jnp.float32)) + jax.random.uniform(rng)
        return {"metrics": {"returned_episode": count % period == phase, "returned_episode_returns": returns}}

    return train
