"""Stand-in for PureJaxRL's ppo.py: make_train(config) returns a function of a PRNG key, as the original's, whose
result holds metrics shaped as the original's traj_batch.info, here known numbers (episodes end at index % 7 == 3)."""
from wrappers import stand_in_train


def make_train(config):
    return stand_in_train(config, 7, 3)
