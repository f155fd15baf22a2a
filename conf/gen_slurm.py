"""slurm.conf from a description and a deployment (pure: values -> text).

The file has marked sections (``# ---- hai-slurm: <name> ----``) so a site can copy the pieces it
wants into its own slurm.conf: ``base`` (daemons, paths, plugins), ``scheduling`` (select, priority,
checkpoint-then-requeue and preemption), ``accounting``, ``nodes`` and ``partitions``.
Settings that moved between Slurm releases are chosen by ``deployment.slurm_version``.
"""

from __future__ import annotations

from hai_slurm.conf.deployment import Deployment, PreemptionMode
from hai_slurm.conf.hostlist import compress, expand
from hai_slurm.conf.model import ClusterDescription, NodeType
from hai_slurm.errors import ConfigError

# Slurm's QOS priority factor is QOS.Priority / max QOS priority, times this weight. The class
# (QOS) must dominate age, so age's weight stays two orders of magnitude below.
PRIORITY_WEIGHT_QOS = 10000
PRIORITY_WEIGHT_AGE = 100


def _section(name: str) -> str:
    return f"\n# ---- hai-slurm: {name} ----"


def _base(desc: ClusterDescription, dep: Deployment) -> list[str]:
    ctl = dep.controller_host + (f"({dep.controller_addr})" if dep.controller_addr else "")
    pernode = "-%n" if dep.multiple_slurmd else ""
    lines = [
        _section("base"),
        f"ClusterName={desc.name}",
        f"SlurmctldHost={ctl}",
        f"SlurmctldPort={dep.controller_port}",
        f"SlurmdPort={dep.slurmd_port}",
        "AuthType=auth/munge",
        "CryptoType=crypto/munge",
        f"SlurmUser={dep.slurm_user}",
        f"StateSaveLocation={dep.state_dir}",
        f"SlurmdSpoolDir={dep.spool_dir}{pernode}",
        f"SlurmctldPidFile={dep.run_dir}/slurmctld.pid",
        f"SlurmdPidFile={dep.run_dir}/slurmd{pernode}.pid",
        f"SlurmctldLogFile={dep.log_dir}/slurmctld.log",
        f"SlurmdLogFile={dep.log_dir}/slurmd{pernode}.log",
        f"SlurmctldDebug={dep.slurmctld_debug}",
        f"SlurmdDebug={dep.slurmd_debug}",
        f"ProctrackType={dep.proctrack_type}",
        f"TaskPlugin={dep.task_plugin}",
        "MpiDefault=none",
        "ReturnToService=2  # a node that was DOWN comes back by itself once slurmd registers",
    ]
    if dep.config_overrides:
        lines.append("SlurmdParameters=config_overrides  # nodes may claim more than the host has")
    if dep.job_submit_lua:
        lines.append("JobSubmitPlugins=lua  # job_submit.lua (next to slurm.conf) reads #HAI lines")
    return lines


def _def_mem_per_cpu(desc: ClusterDescription) -> int:
    """Memory per CPU (MB) that fits every node type: the smallest RealMemory / CPUs."""
    return max(1, min((nt.memory_mb // nt.cpus for _, nt in desc.nodes()), default=1))


def _scheduling(desc: ClusterDescription, dep: Deployment) -> list[str]:
    native = dep.preemption is PreemptionMode.NATIVE
    sched = list(dep.scheduler_parameters)
    lines = [
        _section("scheduling"),
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres  # GPUs are allocated individually (gres/gpu)",
        "SelectTypeParameters=CR_Core_Memory",
        # Without a default, a job that asks for no memory is given all of the node's memory,
        # and GPU jobs could no longer share a node.
        f"DefMemPerCPU={_def_mem_per_cpu(desc)}  # a job without --mem gets this per CPU",
        "GresTypes=gpu",
    ]
    if desc.switches:
        lines.append("TopologyPlugin=topology/tree  # topology.conf: leaf switches and spines")
    lines += [
        "PriorityType=priority/multifactor",
        f"PriorityWeightQOS={PRIORITY_WEIGHT_QOS}  # the priority class (its QOS) dominates",
    ]
    if dep.accounting:  # slurmctld ignores (and logs an error for) the age factor without slurmdbd
        lines += [f"PriorityWeightAge={PRIORITY_WEIGHT_AGE}  # age only orders jobs within a class",
                  "PriorityMaxAge=1-0"]
    lines += [
        "# Checkpoint-then-requeue: batch jobs are requeueable unless submitted --no-requeue,",
        "# and a requeued job may start again cred_expire+1 s after it ended (default 121 s).",
        "JobRequeue=1",
        "AuthInfo=" + ",".join([*([f"socket={dep.munge_socket}"] if dep.munge_socket else []),
                                f"cred_expire={dep.cred_expire_s}"]),
    ]
    if native:
        lines += [
            "# Native preemption: a job of a higher class's QOS requeues lower ones after the",
            "# victim class's GraceTime (set per QOS by the sacctmgr script); SUSPEND would keep",
            "# the GPUs allocated, so GPU preemption must requeue.",
            "PreemptType=preempt/qos",
            "PreemptMode=REQUEUE",
            "# Slurm's preemption signals (SIGCONT, SIGTERM) reach srun steps only, never the",
            "# batch shell: run training as a step (`exec srun python train.py`) or it cannot",
            "# save. The job library saves on SIGTERM and exits 75 (checkpoint/PROTOCOL.md);",
            "# preempt/qos leaves a job that ended by itself within its GraceTime FAILED, so",
            "# exit code 75 is requeued.",
            "RequeueExit=75",
        ]
        if dep.slurm_version.has_preempt_parameters:
            lines.append("PreemptParameters=send_user_signal  # --signal goes out at preemption")
        else:
            # 22.05 has no PreemptParameters (every daemon dies on the key); the option lives in
            # SchedulerParameters with a preempt_ prefix.
            sched.append("preempt_send_user_signal")
    else:
        lines += [
            "# Slurm never preempts: the hai-slurm daemon asks a job to checkpoint (USR2), then",
            "# requeues it (held until the urgent job runs) with scontrol requeuehold.",
            "PreemptType=preempt/none",
            "PreemptMode=OFF",
            "# The safety net while the daemon is down (priority/PREEMPTION.md): a job that",
            "# saved exits 75 (\"saved, requeue me\") and Slurm requeues it; a victim that ended",
            "# otherwise is requeued by the daemon once it is back, while slurmctld still knows",
            "# it: keep ended jobs this long (raise MaxJobCount if more jobs end per MinJobAge).",
            "RequeueExit=75",
            f"MinJobAge={dep.min_job_age_s}",
        ]
    lines += [
        "# Pending, running and kept ended jobs all count; at Slurm's default (10000) every",
        "# sbatch is refused once reached (10000 queued + 2000 running + an hour of ended jobs).",
        f"MaxJobCount={dep.max_job_count}",
    ]
    comment = ("  # --signal is sent at preemption, not only near the time limit"
               if "preempt_send_user_signal" in sched else "")
    lines.append(f"SchedulerParameters={','.join(sched)}{comment}")
    return lines


def _accounting(dep: Deployment) -> list[str]:
    lines = [_section("accounting"), "JobCompType=jobcomp/none",
             "JobAcctGatherType=jobacct_gather/none"]
    if not dep.accounting:
        return [*lines, "AccountingStorageType=accounting_storage/none"]
    return [
        *lines,
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={dep.accounting_host}",
        f"AccountingStoragePort={dep.accounting_port}",
        "AccountingStorageTRES=gres/gpu  # count GPUs per account (quotas, sreport)",
        "# Jobs need an association (team account); QOS = priority class; limits = GrpTRES caps.",
        "AccountingStorageEnforce=associations,limits,qos",
        *([f"AccountingStoragePass={dep.munge_socket}  # slurmdbd connections use this munged"]
          if dep.munge_socket else []),
    ]


def _node_attrs(nt: NodeType) -> str:
    attrs = [f"CPUs={nt.cpus}", f"Sockets={len(nt.sockets)}",
             f"CoresPerSocket={nt.cores_per_socket}", f"ThreadsPerCore={nt.threads_per_core}",
             f"RealMemory={nt.memory_mb}"]
    if nt.gpu_count:
        attrs.append(f"Gres=gpu:{nt.gpu_count}")
    if nt.gpu_model:
        attrs.append(f"Features={nt.gpu_model}")
    return " ".join(attrs)


def _nodes(desc: ClusterDescription, dep: Deployment) -> list[str]:
    lines = [_section("nodes")]
    for grp in desc.node_groups:
        nt = desc.node_type(grp.type)
        attrs = _node_attrs(nt)
        plain: list[str] = []
        for node in expand(grp.nodes):
            ep = dep.endpoint(node)
            if ep.addr is None and ep.port is None and ep.hostname is None:
                plain.append(node)
                continue
            extra = "".join(
                f" {k}={v}" for k, v in (("NodeHostname", ep.hostname), ("NodeAddr", ep.addr),
                                         ("Port", ep.port)) if v is not None)
            lines.append(f"NodeName={node}{extra} {attrs} State=UNKNOWN")
        if plain:
            lines.append(f"NodeName={compress(plain)} {attrs} State=UNKNOWN")
    return lines


def _partitions(desc: ClusterDescription) -> list[str]:
    lines = [_section("partitions")]
    for p in desc.partitions:
        nodes = p.nodes if p.nodes == "ALL" else compress(expand(p.nodes))
        default = " Default=YES" if p.default else ""
        lines.append(f"PartitionName={p.name} Nodes={nodes}{default} MaxTime={p.max_time} "
                     "State=UP")
    return lines


# Settings the generator writes from a description or deployment key: what to set instead of an
# extra line (keys in lower case; Slurm reads them case-insensitively).
_SETTING_OF = {
    "clustername": "[cluster] name",
    "slurmctldhost": "deployment.controller_host (and controller_addr)",
    "slurmctldport": "deployment.controller_port",
    "slurmdport": "deployment.slurmd_port",
    "slurmuser": "deployment.slurm_user",
    "statesavelocation": "deployment.state_dir",
    "slurmdspooldir": "deployment.spool_dir",
    "slurmctldpidfile": "deployment.run_dir",
    "slurmdpidfile": "deployment.run_dir",
    "slurmctldlogfile": "deployment.log_dir",
    "slurmdlogfile": "deployment.log_dir",
    "slurmctlddebug": "deployment.slurmctld_debug",
    "slurmddebug": "deployment.slurmd_debug",
    "proctracktype": "deployment.proctrack_type",
    "taskplugin": "deployment.task_plugin",
    "slurmdparameters": "deployment.config_overrides",
    "jobsubmitplugins": "deployment.job_submit_lua",
    "defmempercpu": "the node types' memory_mb",
    "authinfo": "deployment.cred_expire (and munge_socket)",
    "preempttype": "deployment.preemption",
    "preemptmode": "deployment.preemption",
    "minjobage": "deployment.min_job_age",
    "maxjobcount": "deployment.max_job_count",
    "schedulerparameters": "deployment.scheduler_parameters",
    "accountingstoragetype": "deployment.accounting",
    "accountingstoragehost": "deployment.accounting_host",
    "accountingstorageport": "deployment.accounting_port",
    "accountingstoragepass": "deployment.munge_socket",
}


def _refuse_written_extras(written: list[str], desc: ClusterDescription,
                           dep: Deployment) -> None:
    """An extra line for a key the generator writes itself would put the key in slurm.conf
    twice: refuse it, naming the description setting to use instead."""
    own = {line.split("=", 1)[0].lower(): line.split("  #", 1)[0] for line in written
           if "=" in line and not line.lstrip().startswith("#")}
    for key, value in dep.extra_settings:
        line = own.get(key.lower())
        if line is None:
            continue
        setting = _SETTING_OF.get(key.lower())
        advice = (f"set {setting} instead" if setting else
                  "remove the extra line (hai-slurm's scheduling relies on it: conf/README.md)")
        raise ConfigError(f"{key} is written by the generator ({line}); {advice}",
                          source=desc.source, key=f"deployment.extra.{key}", value=value)


def render_slurm_conf(desc: ClusterDescription, dep: Deployment, header: str) -> str:
    """The whole slurm.conf (the deployment's extra lines end the base section)."""
    base, settings = _base(desc, dep), [*_scheduling(desc, dep), *_accounting(dep)]
    _refuse_written_extras([*base, *settings], desc, dep)
    extras = [f"{k}={v}" for k, v in dep.extra_settings]
    lines = [header, *base, *extras, *settings, *_nodes(desc, dep), *_partitions(desc)]
    return "\n".join(lines) + "\n"
