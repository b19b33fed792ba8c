"""The bundled design spaces, one YAML file each (`modsar spaces` lists them). Installed, this folder is the
package data `modsar.search_spaces`; modsar.sweep.spaces finds it with importlib.resources."""
