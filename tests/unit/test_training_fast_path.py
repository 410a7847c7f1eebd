"""Which hooks let TrainingSession.run() take its fast path (a cached callable of the raw
session): only hooks that do no per-step work. No TensorFlow here: a stand-in base class with
SessionRunHook's five methods; tests/system/test_training_session.py checks the real classes."""
from __future__ import annotations

from tfcluster.runtime.training import hook_acts_per_step


class Base:  # tf.compat.v1.train.SessionRunHook's interface
    def begin(self):
        pass

    def after_create_session(self, session, coord):
        pass

    def before_run(self, run_context):
        return None

    def after_run(self, run_context, run_values):
        pass

    def end(self, session):
        pass


class SessionOnly(Base):  # like TensorFlow's _SyncReplicasOptimizerHook
    def begin(self):
        self.began = True

    def after_create_session(self, session, coord):
        self.created = session


class EndOnly(Base):
    def end(self, session):
        pass


class BeforeRun(Base):
    def before_run(self, run_context):
        return "global_step"


class AfterRun(Base):
    def after_run(self, run_context, run_values):
        pass


class InheritsBeforeRun(BeforeRun):
    def after_create_session(self, session, coord):
        pass


def test_hooks_without_per_step_methods_allow_the_fast_path():
    assert not hook_acts_per_step(Base(), Base)
    assert not hook_acts_per_step(SessionOnly(), Base)
    assert not hook_acts_per_step(EndOnly(), Base)


def test_hooks_with_before_or_after_run_keep_the_monitored_path():
    assert hook_acts_per_step(BeforeRun(), Base)
    assert hook_acts_per_step(AfterRun(), Base)
    assert hook_acts_per_step(InheritsBeforeRun(), Base)


def test_a_method_set_on_the_instance_counts():
    h = SessionOnly()
    h.before_run = lambda run_context: None
    assert hook_acts_per_step(h, Base)


def test_a_duck_typed_hook_is_assumed_to_act_per_step():
    class Duck:
        def after_create_session(self, session, coord):
            pass

    assert hook_acts_per_step(Duck(), Base)
