export PYTHONPATH=$PWD/src; NCU_POINTS="gpt-oss-120b:mxfp4:1 nemotron-nano:nvfp4:1" NCU_KERNELS="_ws" NCU_TIMEOUT_S=150 bash benchmarks/device_run.sh ncu
