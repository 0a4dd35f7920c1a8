bash bench/gpu_bench_session.sh 540
