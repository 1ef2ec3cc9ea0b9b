"""Python-backend model sources copied into the repository as <model>/1/model.py. They import
`triton_python_backend_utils`, which exists only inside tritonserver's python stub: do not import them here."""
