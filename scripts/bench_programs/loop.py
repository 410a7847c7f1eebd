"""The training loop of the benchmark's runtime programs (conv.py, links.py): tfcluster's
``TrainingSession`` to ``steps`` global steps, ``on_step(global_step)`` after each run."""


def train(rt, ctx, server, steps, train_op, global_step, sync_optimizer=None, on_step=None):
    with rt.TrainingSession(ctx, server, last_step=steps, sync_optimizer=sync_optimizer,
                            save_summaries_steps=None) as sess:
        while not sess.should_stop():
            out = sess.run([train_op, global_step])
            if out is None:
                break
            if on_step is not None:
                on_step(int(out[1]))
        return sess.current_step()
