"""`base`: no training. The untouched model is evaluated, giving the reference row of every table."""

from __future__ import annotations

from esbench.methods import Method, TrainResult


class Base(Method):
    trains = False

    def train(self, train_data, reward, budget, config, ctx):
        return TrainResult()
