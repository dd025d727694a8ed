"""The training engine: data on the device, jitted ``lax.scan`` chunks, ``vmap`` over seeds.

Split by job:

* :mod:`offrl.engine.data`        dataset -> device arrays (+ an algorithm's ``extra_arrays``), samplers
* :mod:`offrl.engine.chunks`      compiled chunks of scanned updates, vmapped over seeds
* :mod:`offrl.engine.evaluation`  rollouts of the policies through :mod:`offrl.rollout`, the Q-vs-return monitor
* :mod:`offrl.engine.run`         the run folder's :class:`Run`, :func:`load_run`, :func:`evaluate`
* :mod:`offrl.engine.training`    the one offline loop (:func:`offline_loop`) and :func:`train`
* :mod:`offrl.engine.online`      the one online learner (:class:`OnlineLearner`): env -> replay -> updates
* :mod:`offrl.engine.throughput`  :func:`measure_throughput`

The metrics log, resume truncation and the finite check live in :mod:`offrl.run_folder`,
shared with the preference trainers.
"""

from offrl.engine.chunks import Trainer, create_agents, make_chunk_fn
from offrl.engine.data import DataInfo, TRANSITION_KEYS, prepare_data, sample_transitions
from offrl.engine.evaluation import Evaluator, summarise_evaluation
from offrl.engine.run import Run, evaluate, load_run
from offrl.engine.throughput import measure_throughput
from offrl.engine.online import OnlineLearner, carry_over
from offrl.engine.training import LoopHooks, offline_loop, train
from offrl.run_folder import MetricsLog, read_metrics

__all__ = ["DataInfo", "Evaluator", "LoopHooks", "MetricsLog", "OnlineLearner", "Run", "TRANSITION_KEYS", "Trainer",
           "carry_over", "create_agents", "evaluate", "load_run", "make_chunk_fn", "measure_throughput", "offline_loop",
           "prepare_data", "read_metrics", "sample_transitions", "summarise_evaluation", "train"]
