"""The machine model: the machine's facts and GEMM peaks, its constants by micro-benchmark (cached), and a
call's time predicted from them."""
