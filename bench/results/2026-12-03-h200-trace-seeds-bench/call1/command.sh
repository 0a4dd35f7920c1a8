bash bench/gpu_session.sh 560
