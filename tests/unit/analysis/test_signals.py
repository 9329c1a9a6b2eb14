"""Tag -> dimension mapping for the writers people use, and Keras sibling runs."""

import pytest

from tb_crash_signals.analysis.signals import families, group_runs


def mapping(tags, run="r", overrides=None):
    (lr,) = group_runs({run: tags}, overrides)
    return {k: (v.tag if v else None) for k, v in lr.signals.items()}


@pytest.mark.parametrize(
    "tags, expected",
    [
        (  # PyTorch SummaryWriter tutorial style
            ["Loss/train", "Loss/val", "Grad/norm", "LR", "Accuracy/val"],
            dict(train_loss="Loss/train", val_loss="Loss/val", grad_norm="Grad/norm", lr="LR"),
        ),
        (  # HuggingFace Trainer
            ["train/loss", "train/grad_norm", "train/learning_rate", "train/epoch", "eval/loss",
             "eval/accuracy", "train/train_loss", "eval/runtime"],
            dict(train_loss="train/loss", val_loss="eval/loss", grad_norm="train/grad_norm",
                 lr="train/learning_rate"),
        ),
        (  # Lightning
            ["train_loss_step", "train_loss_epoch", "val_loss", "lr-Adam", "grad_2.0_norm_total", "epoch"],
            dict(train_loss="train_loss_step", val_loss="val_loss", grad_norm="grad_2.0_norm_total",
                 lr="lr-Adam"),
        ),
        (  # TF Object Detection API
            ["Loss/total_loss", "Loss/classification_loss", "Loss/localization_loss",
             "Loss/regularization_loss", "learning_rate"],
            dict(train_loss="Loss/total_loss", lr="learning_rate"),
        ),
        (  # custom
            ["optim/grad_global_norm", "optim/update_ratio", "optim/lr", "loss/train", "loss/val"],
            dict(train_loss="loss/train", val_loss="loss/val", grad_norm="optim/grad_global_norm",
                 update_ratio="optim/update_ratio", lr="optim/lr"),
        ),
        (  # free-form names
            ["Training loss", "Test loss (avg on test)", "IoU (avg on test)", "amp/loss_scale"],
            dict(train_loss="Training loss", val_loss="Test loss (avg on test)"),
        ),
        (  # fairseq: its per-update and per-epoch training metrics, and the validation's
            ["train_inner/loss", "train_inner/gnorm", "train_inner/lr", "train_inner/loss_scale", "valid/loss"],
            dict(train_loss="train_inner/loss", val_loss="valid/loss", grad_norm="train_inner/gnorm",
                 lr="train_inner/lr"),
        ),
        (  # ESPnet
            ["train/loss", "valid/loss", "optim0_lr0", "grad_norm", "clip"],
            dict(train_loss="train/loss", val_loss="valid/loss", grad_norm="grad_norm", lr="optim0_lr0"),
        ),
        (  # Megatron-LM
            ["lm loss", "lm loss validation", "grad-norm", "learning-rate", "loss-scale", "params-norm"],
            dict(train_loss="lm loss", val_loss="lm loss validation", grad_norm="grad-norm", lr="learning-rate"),
        ),
        (  # OLMo-core
            ["train/CE loss", "optim/total grad norm", "optim/LR (group 0)", "eval/lm/c4/CE loss"],
            dict(train_loss="train/CE loss", val_loss="eval/lm/c4/CE loss", grad_norm="optim/total grad norm",
                 lr="optim/LR (group 0)"),
        ),
        (  # Composer / LLM Foundry: the eval loss is a metric named by what it computes
            ["loss/train/total", "metrics/train/LanguageCrossEntropy", "metrics/eval/LanguageCrossEntropy",
             "metrics/eval/LanguagePerplexity", "lr-DecoupledAdamW/group0", "l2_norm/grad/global"],
            dict(train_loss="loss/train/total", val_loss="metrics/eval/LanguageCrossEntropy",
                 grad_norm="l2_norm/grad/global", lr="lr-DecoupledAdamW/group0"),
        ),
        (  # a VAE's terms, no total: the reconstruction, not the KL term that climbs by design
            ["Loss/KL", "Loss/Reconstruction", "Loss/KL_val", "Loss/Reconstruction_val"],
            dict(train_loss="Loss/Reconstruction", val_loss="Loss/Reconstruction_val"),
        ),
        (  # a mixture of experts: its balancing and router terms beside the language-model loss
            ["train/aux_loss", "train/lm_loss", "train/router_z_loss", "val/lm_loss"],
            dict(train_loss="train/lm_loss", val_loss="val/lm_loss"),
        ),
        (  # OpenNMT: the cross-entropy as `xent`, beside the perplexity
            ["progress/xent", "progress/ppl", "progress/accuracy", "progress/tgtper", "progress/lr",
             "valid/xent", "valid/ppl", "valid/accuracy"],
            dict(train_loss="progress/xent", val_loss="valid/xent", lr="progress/lr"),
        ),
        (["train/nll", "val/nll", "train/bits_per_dim"], dict(train_loss="train/nll", val_loss="val/nll")),
        (["klLoss", "reconLoss"], dict(train_loss="reconLoss")),
        (["train/kl_loss"], dict(train_loss="train/kl_loss")),  # the only loss logged is still read
        (["train/l1_loss", "train/reg_loss"], dict(train_loss="train/l1_loss")),  # an L1 objective
        (["accuracy", "images/sample", "layer/lognorm", "slr", "glr2"], {}),
    ],
)
def test_writer_styles(tags, expected):
    got = mapping(tags)
    for dim in ("train_loss", "val_loss", "grad_norm", "update_ratio", "lr"):
        assert got[dim] == expected.get(dim), dim


def test_mapping_is_deterministic_whatever_the_tag_order():
    tags = ["loss", "train/loss", "Loss/train", "eval/loss", "val_loss"]
    assert mapping(tags) == mapping(list(reversed(tags)))


def test_keras_sibling_runs_become_one_logical_run():
    runs = group_runs(
        {
            "exp/train": ["epoch_loss", "batch_loss", "epoch_learning_rate"],
            "exp/validation": ["epoch_loss", "epoch_accuracy"],
            "exp": [],  # the hparams-only file Keras writes in the parent
            "other": ["loss"],
        }
    )
    assert [r.name for r in runs] == ["exp", "other"]
    exp = runs[0]
    assert exp.members == ("exp/train", "exp/validation")
    assert (exp.signals["train_loss"].run, exp.signals["train_loss"].tag) == ("exp/train", "epoch_loss")
    assert (exp.signals["val_loss"].run, exp.signals["val_loss"].tag) == ("exp/validation", "epoch_loss")
    assert exp.signals["lr"].tag == "epoch_learning_rate"


def test_an_estimator_s_model_directory_joins_its_eval_directory():
    runs = group_runs(
        {
            "model": ["loss", "global_step/sec", "learning_rate"],
            "model/eval": ["loss", "accuracy"],
            "keras/train": ["epoch_loss"],
            "keras/validation": ["epoch_loss"],
            "keras": ["epoch_loss"],  # scalars in the parent of train/ and validation/: three runs
        }
    )
    assert [r.name for r in runs] == ["keras", "keras/train", "keras/validation", "model"]
    model = runs[-1]
    assert model.members == ("model", "model/eval")
    got = {dim: (ref.run, ref.tag) for dim, ref in model.signals.items() if ref is not None}
    assert got == {"train_loss": ("model", "loss"), "val_loss": ("model/eval", "loss"),
                   "lr": ("model", "learning_rate")}


def test_families_group_at_least_what_group_runs_does_whatever_the_tags():
    names = ["model", "model/eval", "exp/train", "exp/validation", "exp", "other", "a/validation/train"]
    groups = {tuple(g) for g in families(names)}
    for tags in ({n: [] for n in names}, {n: ["loss"] for n in names}):
        for lr in group_runs(tags):
            assert any(set(lr.members) <= set(g) for g in groups), lr.members


def test_fairseq_s_per_update_and_per_epoch_runs_join_its_validation_the_per_update_one_read():
    runs = group_runs(
        {
            "ckpt/tb/valid": ["loss", "nll_loss", "ppl"],
            "ckpt/tb/train": ["loss", "gnorm", "lr", "wall"],
            "ckpt/tb/train_inner": ["loss", "gnorm", "lr", "loss_scale"],
        }
    )
    (run,) = runs
    assert run.name == "ckpt/tb" and run.members == ("ckpt/tb/train_inner", "ckpt/tb/train", "ckpt/tb/valid")
    got = {dim: (ref.run, ref.tag) for dim, ref in run.signals.items() if ref is not None}
    assert got == {"train_loss": ("ckpt/tb/train_inner", "loss"), "val_loss": ("ckpt/tb/valid", "loss"),
                   "grad_norm": ("ckpt/tb/train_inner", "gnorm"), "lr": ("ckpt/tb/train_inner", "lr")}


def test_train_and_test_dirs_pair_too_and_root_siblings_are_named_dot():
    (run,) = group_runs({"train": ["loss"], "test": ["v_loss"]})
    assert run.name == "."
    assert run.signals["val_loss"].tag == "v_loss"


def test_overrides_win_and_search_the_right_sibling():
    runs = group_runs(
        {"x/train": ["weird_a"], "x/validation": ["weird_a"]},
        {"train_loss": ("missing", "weird_a"), "val_loss": ("weird_a",), "lr": ()},
    )
    (x,) = runs
    assert (x.signals["train_loss"].run, x.signals["train_loss"].tag) == ("x/train", "weird_a")
    assert (x.signals["val_loss"].run, x.signals["val_loss"].tag) == ("x/validation", "weird_a")
    assert x.signals["lr"] is None


def test_hostile_names_are_just_names():
    name = "<img src=x onerror=alert(1)>"
    (run,) = group_runs({name: [name + "/loss"]})
    assert run.name == name and run.signals["train_loss"].tag == name + "/loss"


@pytest.mark.parametrize(
    "tags, kind",
    [
        (["d_loss", "g_loss"], "adversarial"),
        (["Loss/D", "Loss/G", "D(x)", "D(G(z))"], "adversarial"),  # the PyTorch DCGAN tutorial's names
        (["lossD", "lossG"], "adversarial"),
        (["loss_D_A", "loss_G_A", "loss_cycle_A", "loss_idt_A"], "adversarial"),  # CycleGAN
        (["loss/generator", "loss/critic"], "adversarial"),  # WGAN
        (["train/loss", "rollout/ep_rew_mean"], "reinforcement"),  # Stable-Baselines3
        (["losses/td_loss", "charts/episodic_return"], "reinforcement"),  # CleanRL
        (["Train/AverageReturns", "Loss"], "reinforcement"),  # Dopamine
        (["train/loss", "train/reward", "train/kl"], "reinforcement"),  # TRL's GRPO
        # TRL's DPO: implicit rewards of a preference objective, whose loss falls
        (["train/loss", "train/rewards/chosen", "train/rewards/rejected", "train/rewards/margins"], "objective"),
        (["train/loss", "val/loss", "train/grad_norm"], "objective"),
        (["g_loss"], "objective"),  # one player named: nothing says it is a GAN
        (["adv_loss", "loss"], "objective"),  # adversarial training's loss is an objective
        # ELECTRA's generator and discriminator learn together; their sum is the objective
        (["generator_loss", "discriminator_loss", "loss"], "objective"),
        (["train/loss", "val/returns_mse_loss"], "objective"),  # a loss about returns is a loss
    ],
)
def test_what_a_runs_losses_are(tags, kind):
    (run,) = group_runs({"r": tags})
    assert run.loss_kind == kind


def test_a_train_loss_the_config_names_is_judged_as_an_objective():
    (run,) = group_runs({"r": ["d_loss", "g_loss"]}, {"train_loss": ("g_loss",)})
    assert run.loss_kind == "objective" and run.signals["train_loss"].tag == "g_loss"


def test_a_gan_split_into_keras_siblings_is_one_adversarial_run():
    (run,) = group_runs({"x/train": ["d_loss", "g_loss"], "x/validation": ["d_loss"]})
    assert run.loss_kind == "adversarial"


def test_a_perplexity_is_read_as_its_log_only_where_no_loss_is_logged():
    run = group_runs({"lm": ["train/ppl", "val/perplexity", "lr"]})[0]
    assert (run.signals["train_loss"].tag, run.signals["train_loss"].log) == ("train/ppl", True)
    assert (run.signals["val_loss"].tag, run.signals["val_loss"].log) == ("val/perplexity", True)
    assert run.signals["train_loss"].to_json() == {"run": "lm", "tag": "train/ppl", "log": True}
    assert run.signals["lr"].to_json() == {"run": "lm", "tag": "lr"}
    # fairseq logs both: the loss is read, as logged.
    both = group_runs({"lm": ["train/ppl", "train/loss", "valid/ppl", "valid/loss"]})[0]
    assert [(both.signals[d].tag, both.signals[d].log) for d in ("train_loss", "val_loss")] == [
        ("train/loss", False), ("valid/loss", False)]
    # A perplexity the config names is still one; a tag that names a loss is not.
    named = group_runs({"lm": ["trainPerplexity", "x"]}, {"train_loss": ["trainPerplexity"]})[0]
    assert named.signals["train_loss"].log
    assert not group_runs({"lm": ["train/ppl_loss"]})[0].signals["train_loss"].log
