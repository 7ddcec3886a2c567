# A copy of gr-oppsched/python/oppsched/yaml_config.py (the PHY package's loader), so that
# oppsched.config reads experiment files without the built gnuradio.oppsched;
# tools/tests/test_config.py checks that the two are the same loader.
"""The project's one YAML loader: safe, and a key repeated in one mapping is an error.

Every Python reader of a configuration (experiment files, phy.yaml, the channel emulator's
configuration) goes through `load_yaml`, so the same file means the same thing to all of
them; the C++ daemons' yaml-cpp reader rejects repeated keys too. A repeated key is almost
always a mistake (the second value silently winning hides the first).
"""

import yaml


class YamlError(ValueError):
    """A YAML text that cannot be loaded; the message names the line and the key."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects a key repeated in one mapping."""


def _mapping_no_dupes(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise YamlError(f"{key}: duplicate key (line {key_node.start_mark.line + 1})")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_no_dupes)


def load_yaml(text):
    """Parses `text` (safe subset, duplicate keys rejected). An empty document is None.
    Raises YamlError on invalid YAML or a repeated key."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except YamlError:
        raise
    except yaml.YAMLError as exc:
        raise YamlError(f"not valid YAML ({exc})") from None
