"""analysis.studies"""
