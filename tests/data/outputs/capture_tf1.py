import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
v1.logging.set_verbosity(v1.logging.INFO)
gs = v1.train.get_or_create_global_step()
w = v1.Variable(1.0)
loss = tf.square(w)
train = v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=gs)
hooks = [v1.train.StopAtStepHook(last_step=300), v1.train.LoggingTensorHook({"loss": loss, "step": gs}, every_n_iter=100)]
with v1.train.MonitoredTrainingSession(hooks=hooks, log_step_count_steps=100) as s:
    while not s.should_stop():
        s.run(train)
