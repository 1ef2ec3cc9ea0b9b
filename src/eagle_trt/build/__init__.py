"""Bundle building: the build request (`request.py`: every `eagle-trt build` option, `run_build`) and the bundle
it writes (`bundle.py`); what each engine contributes lives with that engine (`eagle_trt.engines`)."""
