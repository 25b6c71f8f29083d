"""For package authors: project files, scaffolding, the build and its toolchain, ``stockade dev``.

Empty on purpose: ``stockade --help`` imports no submodule; import the one you use.
"""
