"""torchrun's ranks: a grid spread over them (``world``), and the heads of one module split over them
(``head_parallel``)."""
