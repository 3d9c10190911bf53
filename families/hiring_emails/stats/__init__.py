"""The hiring-email family's statistics: plain functions over DataFrames and texts (the
contract ``family-statistics-are-plain``: nothing here imports the simulator)."""
