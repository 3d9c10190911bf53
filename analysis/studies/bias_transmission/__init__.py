"""analysis.studies.bias_transmission"""
