"""The model zoo: names, metadata, options, faithful parameter counts, user model files."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from cloudfit.errors import ProfileError
from cloudfit.profiling import zoo

REQUIRED = ["resnet18", "resnet50", "resnet101", "resnet152", "vgg16", "inception_v3", "mobilenet_v2", "densenet121",
            "bert-base", "bert-large", "gpt2", "gpt2-medium", "transformer-base", "gnmt", "ncf", "ssd300", "mlp"]

# torchvision's exact counts for the hand-written CNNs (torchvision.models docs / sum of numel).
TORCHVISION_PARAMS = {
    "resnet18": 11_689_512, "resnet50": 25_557_032, "resnet101": 44_549_160, "resnet152": 60_192_808,
    "vgg16": 138_357_544, "inception_v3": 27_161_264, "mobilenet_v2": 3_504_872, "densenet121": 7_978_856,
    "ssd300": 35_641_826, "alexnet": 61_100_840,
}
# Published sizes (millions) for the rest: BERT/GPT-2 papers and model cards, Transformer-base 65 M (paper,
# 37k vocab), GNMT v2 ~160 M (NVIDIA DeepLearningExamples), NeuMF on ML-20M ~31.8 M (MLPerf reference).
PUBLISHED_M = {"bert-base": 110, "bert-large": 335, "gpt2": 124.4, "gpt2-medium": 354.8, "transformer-base": 65,
               "gnmt": 160, "ncf": 31.8}


def _params(name: str, **options) -> int:
    return sum(p.numel() for p in zoo.build(name, device="meta", **options).model.parameters())


def test_zoo_has_every_required_model():
    assert set(REQUIRED) <= set(zoo.names())


def test_info_says_where_each_definition_comes_from():
    for name in zoo.names():
        i = zoo.info(name)
        assert i["definition"] in ("library", "hand-written")
        assert i["default_batch_size"] >= 1 and i["cpu_batch_size"] >= 1 and i["task"] and i["input"] and i["source"]
    assert "torchvision does not import" in zoo.info("resnet50")["source"]
    assert "transformers" in zoo.info("bert-large")["source"] and zoo.info("bert-large")["input"] == "384 tokens"
    assert zoo.info("gpt2-medium")["input"] == "1024 tokens"
    assert "torch.nn.Transformer" in zoo.info("transformer-base")["source"]


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_hand_written_cnns_match_torchvision_parameter_counts(name):
    assert _params(name) == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED_M))
def test_library_and_recipe_models_match_published_sizes(name):
    assert _params(name) / 1e6 == pytest.approx(PUBLISHED_M[name], rel=0.04)


def test_options_build_benchmark_variants():
    # CIFAR-10 ResNet-18 (kuangliu-style stem): 11.17 M parameters with a 10-class head.
    zm = zoo.build("resnet18", image_size=32, num_classes=10, cifar_stem=True, device="meta")
    assert sum(p.numel() for p in zm.model.parameters()) == 11_173_962
    assert zm.input == "3x32x32 image" and zm.options["cifar_stem"] is True
    x, y = zm.make_batch(4, "meta")
    assert tuple(x.shape) == (4, 3, 32, 32) and tuple(zm.model(x).shape) == (4, 10)
    assert zoo.build("bert-base", seq_len=128, device="meta").input == "128 tokens"
    assert zoo.build("inception_v3", aux_logits=False, device="meta").options["aux_logits"] is False
    assert _params("resnet32", depth=56) > _params("resnet32")


@pytest.mark.parametrize("name, options, message", [
    ("nosuch", {}, "unknown model 'nosuch'"),
    ("resnet50", {"seq_len": 128}, "resnet50 does not take option(s) seq_len"),
    ("resnet50", {"image_size": 8}, "image_size must be an integer in [32, 4096]"),
    ("resnet50", {"num_classes": "ten"}, "num_classes must be an integer"),
    ("resnet50", {"cifar_stem": 1}, "cifar_stem must be true or false"),
    ("gpt2", {"seq_len": 2048}, "seq_len must be an integer in [1, 1024]"),
    ("bert-large", {"seq_len": 0}, "seq_len must be an integer in [1, 512]"),
    ("inception_v3", {"image_size": 64}, "image_size must be an integer in [75, 4096]"),
    ("resnet32", {"depth": 33}, "depth must be 6n+2"),
    ("ssd300", {"num_classes": 1}, "at least 2"),
])
def test_bad_names_and_options_raise_one_clear_line(name, options, message):
    with pytest.raises(ProfileError) as e:
        zoo.build(name, device="meta", **options)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_importing_the_zoo_does_not_import_torch():
    code = "import sys, cloudfit.profiling.zoo as z, cloudfit.profiling.io; z.info('gpt2'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_built_model_trains_one_step_on_cpu():
    zm = zoo.build("mlp")
    batch = zm.make_batch(8, "cpu")
    loss = zm.loss(zm.model, batch)
    loss.backward()
    assert loss.ndim == 0 and all(p.grad is not None for p in zm.model.parameters())


# --------------------------------------------------------------------------------------------
# --model-file


def _write(tmp_path, body: str, name: str = "mymodel.py"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def test_load_user_model_tuple_and_default_loss(tmp_path):
    p = _write(tmp_path, """
        import torch
        def factory():
            model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
            def make_batch(batch_size, device):
                return torch.randn(batch_size, 16, device=device), torch.randint(0, 4, (batch_size,), device=device)
            return model, make_batch
    """)
    zm = zoo.load_user_model(f"{p}:factory")
    assert zm.name == "mymodel" and zm.default_batch_size == 32 and zm.loss is zoo.default_loss
    loss = zm.loss(zm.model, zm.make_batch(5, "cpu"))
    assert loss.ndim == 0 and loss.item() > 0  # cross-entropy on integer targets
    assert zoo.load_user_model(str(p)).name == "mymodel"  # ":factory" is the default


def test_load_user_model_dict_with_loss_and_batch_size(tmp_path):
    p = _write(tmp_path, """
        import torch
        def make():
            model = torch.nn.Linear(3, 1)
            return {"model": model, "make_batch": lambda b, d: torch.ones(b, 3, device=d),
                    "loss": lambda m, x: (m(x) ** 2).mean(), "batch_size": 7, "task": "regression", "input": "3 floats"}
    """)
    zm = zoo.load_user_model(f"{p}:make")
    assert (zm.default_batch_size, zm.task, zm.input) == (7, "regression", "3 floats")
    assert zm.loss(zm.model, zm.make_batch(2, "cpu")).ndim == 0


def test_default_loss_conventions():
    import torch

    lin = torch.nn.Linear(4, 3)
    x = torch.randn(6, 4)
    t = torch.randn(6, 3)
    assert torch.allclose(zoo.default_loss(lin, (x, t)), torch.nn.functional.mse_loss(lin(x), t))
    y = torch.randint(0, 3, (6,))
    assert torch.allclose(zoo.default_loss(lin, (x, y)), torch.nn.functional.cross_entropy(lin(x), y))
    assert torch.allclose(zoo.default_loss(lin, x), lin(x).mean())

    class WithLoss(torch.nn.Module):
        def forward(self, input_ids):
            return {"loss": input_ids.float().sum() * 0 + 3.0}

    assert zoo.default_loss(WithLoss(), {"input_ids": torch.ones(2, 2)}).item() == 3.0


@pytest.mark.parametrize("body, spec_suffix, message", [
    ("x = 1\n", ":factory", "has no function factory()"),
    ("def factory():\n    raise ValueError('boom')\n", ":factory", "factory() raised ValueError: boom"),
    ("def factory():\n    return 42\n", ":factory", "must return (model, make_batch[, loss])"),
    ("def factory():\n    return 'm', lambda b, d: None\n", ":factory", "the model must be a torch.nn.Module"),
    ("import no_such_module_xyz\n", ":factory", "importing"),
])
def test_load_user_model_errors(tmp_path, body, spec_suffix, message):
    p = _write(tmp_path, body)
    with pytest.raises(ProfileError) as e:
        zoo.load_user_model(f"{p}{spec_suffix}")
    assert message in str(e.value)


def test_load_user_model_missing_file(tmp_path):
    with pytest.raises(ProfileError, match="not found"):
        zoo.load_user_model(f"{tmp_path}/nope.py:factory")
